package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
)

// client calls one member's admin API.
type client struct {
	endpoint string
	token    string
	caFile   string
	http     *http.Client
}

func (c *client) init() error {
	if _, err := url.Parse(c.endpoint); err != nil {
		return fmt.Errorf("endpoint: %w", err)
	}
	c.endpoint = strings.TrimSuffix(c.endpoint, "/")
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if c.caFile != "" {
		pem, err := os.ReadFile(c.caFile)
		if err != nil {
			return fmt.Errorf("cacert: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("cacert: no certificate in %s", c.caFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	c.http = &http.Client{Transport: tr}
	return nil
}

// apiError is an answer other than 200, with the member's message.
type apiError struct {
	Status int
	Msg    string
}

func (e *apiError) Error() string { return fmt.Sprintf("%s (HTTP %d)", e.Msg, e.Status) }

// do sends one request; into, when non-nil, receives the JSON answer.
func (c *client) do(ctx context.Context, method, path string, query url.Values, body io.Reader, into any) error {
	resp, err := c.send(ctx, method, path, query, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if into == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
		return fmt.Errorf("decode answer of %s: %w", path, err)
	}
	return nil
}

// send returns the response of a request that succeeded; the caller
// closes its body.
func (c *client) send(ctx context.Context, method, path string, query url.Values, body io.Reader) (*http.Response, error) {
	u := c.endpoint + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusOK {
		return resp, nil
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	var e struct {
		Error string `json:"error"`
	}
	msg := strings.TrimSpace(string(raw))
	if json.Unmarshal(raw, &e) == nil && e.Error != "" {
		msg = e.Error
	}
	if resp.StatusCode == http.StatusNotFound && msg == "404 page not found" {
		msg = "no admin endpoint there (is it enabled with coord.WithAdmin, and the endpoint the handler's mount point?)"
	}
	return nil, &apiError{Status: resp.StatusCode, Msg: msg}
}

func jsonBody(v any) io.Reader {
	b, _ := json.Marshal(v) // plain structs: cannot fail
	return bytes.NewReader(b)
}
