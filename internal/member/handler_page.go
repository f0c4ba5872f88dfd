package member

import (
	"bytes"
	"html/template"
	"net/http"

	"github.com/coordcell/coord/internal/spi"
)

// pageTemplate is the read-only debug page, in the manner of Go's own
// (net/http/pprof, expvar): plain server-rendered HTML, no script, so it
// works from any browser or curl and html/template escapes every name
// and value a user wrote into the cell.
var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{
	"add1": func(i int) int { return i + 1 },
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>coord: {{.Status.Member}}</title>
<style>
body{font-family:sans-serif;margin:1em 2em}
table{border-collapse:collapse;margin-bottom:1.5em}
th,td{border:1px solid #ccc;padding:2px 8px;text-align:left;font-family:monospace}
th{background:#eee}
.unreachable{color:#b00}
.lock-delay{color:#b60}
</style>
</head>
<body>
<h1>coord member {{.Status.Member}}</h1>
<p id="summary">role <b id="role">{{.Status.Role}}</b>, term <b id="term">{{.Status.Term}}</b>,
leader <b id="leader">{{with .Status.Leader}}{{.}}{{else}}none{{end}}</b>,
revision {{.Status.Revision}}, commit {{.Status.Commit}}, applied {{.Status.Applied}},
{{if .Status.Ready}}ready{{else}}not ready: {{.Status.NotReady}}{{end}}.
Generated {{.Generated.Format "2006-01-02T15:04:05Z07:00"}}; this member's applied state, not a linearizable read.</p>
{{with .Err}}<p id="error">could not read the cell: {{.}}</p>{{end}}

<h2>Members</h2>
<table id="members">
<tr><th>name</th><th>address</th><th>role</th><th>leader</th><th>health</th><th>match</th></tr>
{{range .Status.Members}}<tr class="{{.Health}}"><td>{{.Name}}{{if .Current}} (this){{end}}</td><td>{{.Addr}}</td><td>{{.Role}}</td><td>{{if .Leader}}yes{{end}}</td><td>{{.Health}}</td><td>{{if .Match}}{{.Match}}{{end}}</td></tr>
{{end}}</table>

<h2>Locks</h2>
<table id="locks">
<tr><th>lock</th><th>position</th><th>key</th><th>session</th><th>token</th></tr>
{{range .Locks}}{{$name := .Name}}{{$held := .Held}}{{with .LockDelay}}<tr class="lock-delay"><td>{{$name}}</td><td>lock-delay {{.Delay}} from revision {{.Revision}}, no holder</td><td>{{.Key}}</td><td></td><td></td></tr>
{{end}}{{range $i, $q := .Queue}}<tr><td>{{$name}}</td><td>{{if $held}}{{if eq $i 0}}holder{{else}}waiter {{$i}}{{end}}{{else}}waiter {{add1 $i}}{{end}}</td><td>{{$q.Key}}</td><td>{{$q.Session}}</td><td>{{$q.Token}}</td></tr>
{{end}}{{else}}<tr><td colspan="5">no locks</td></tr>
{{end}}</table>

<h2>Elections</h2>
<table id="elections">
<tr><th>group</th><th>position</th><th>value</th><th>session</th><th>token</th></tr>
{{range .Elections}}{{$g := .Group}}{{range $i, $q := .Candidates}}<tr><td>{{$g}}</td><td>{{if eq $i 0}}leader{{else}}candidate {{$i}}{{end}}</td><td>{{$q.Value}}</td><td>{{$q.Session}}</td><td>{{$q.Token}}</td></tr>
{{end}}{{else}}<tr><td colspan="5">no elections</td></tr>
{{end}}</table>

<h2>Sessions</h2>
<table id="sessions">
<tr><th>id</th><th>ttl</th><th>unheard</th><th>ephemeral keys</th></tr>
{{range .Sessions}}<tr><td>{{.ID}}</td><td>{{.TTL}}</td><td>{{.Unheard}}</td><td>{{.Keys}}</td></tr>
{{else}}<tr><td colspan="4">no sessions</td></tr>
{{end}}</table>
</body>
</html>
`))

// servePage renders the page into a buffer first, so a template error
// becomes a 500 rather than half a page.
func (n *Node) servePage(w http.ResponseWriter, r *http.Request) {
	in := n.inspect(r.Context(), spi.ReadOptions{Serializable: true})
	var buf bytes.Buffer
	if err := pageTemplate.Execute(&buf, in); err != nil {
		http.Error(w, "render: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(buf.Bytes())
}
