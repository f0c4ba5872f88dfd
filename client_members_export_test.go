package coord

// MergeLearned exposes mergeLearned to the client tests.
func MergeLearned(configured, answer, before []string, tcp bool) []string {
	return mergeLearned(configured, answer, before, tcp)
}
