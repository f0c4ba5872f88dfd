module github.com/coordcell/coord/bench

go 1.26

require github.com/coordcell/coord v0.0.0

replace github.com/coordcell/coord => ../
