//go:build e2enode

package k8se2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// client talks to the kubelet's and the API server's REST APIs over TLS,
// trusting only the test's CA, with an optional client certificate or
// bearer token.
type client struct {
	http  *http.Client
	token string
}

func newClient(p *pki, cert, key string) (*client, error) {
	cfg := &tls.Config{RootCAs: p.pool()}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	tr := &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}
	return &client{http: &http.Client{Transport: tr, Timeout: 30 * time.Second}}, nil
}

// get returns the body of a 200 answer.
func (c *client) get(ctx context.Context, url string) ([]byte, error) {
	return c.do(ctx, http.MethodGet, url, nil)
}

// do sends body (JSON, if any) and returns the answer's body; an answer
// outside 2xx is an error that quotes it.
func (c *client) do(ctx context.Context, method, url string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return data, &statusError{method: method, url: url, code: resp.StatusCode, body: string(data)}
	}
	return data, nil
}

// statusError is an answer outside 2xx.
type statusError struct {
	method, url string
	code        int
	body        string
}

func (e *statusError) Error() string {
	return fmt.Sprintf("%s %s: %d %s", e.method, e.url, e.code, e.body)
}

// getJSON decodes a GET's answer into v.
func (c *client) getJSON(ctx context.Context, url string, v any) error {
	data, err := c.get(ctx, url)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

// Pod is the part of a v1.Pod the tests read.
type Pod struct {
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
		UID       string `json:"uid"`
	} `json:"metadata"`
	Spec struct {
		NodeName string `json:"nodeName"`
	} `json:"spec"`
	Status PodStatus `json:"status"`
}

// PodStatus is the part of a v1.PodStatus the tests read.
type PodStatus struct {
	Phase             string            `json:"phase"`
	Reason            string            `json:"reason"`
	Message           string            `json:"message"`
	ContainerStatuses []ContainerStatus `json:"containerStatuses"`
}

// ContainerStatus is the part of a v1.ContainerStatus the tests read.
type ContainerStatus struct {
	Name         string `json:"name"`
	ContainerID  string `json:"containerID"`
	RestartCount int    `json:"restartCount"`
	Ready        bool   `json:"ready"` // its readinessProbe passes
	State        struct {
		Running *struct{} `json:"running"`
		Waiting *struct {
			Reason  string `json:"reason"`
			Message string `json:"message"`
		} `json:"waiting"`
		Terminated *struct {
			ExitCode int    `json:"exitCode"`
			Reason   string `json:"reason"`
			Message  string `json:"message"`
		} `json:"terminated"`
	} `json:"state"`
}

// podList is a v1.PodList.
type podList struct {
	Items []Pod `json:"items"`
}

// find returns the pod called name in namespace ns.
func (l podList) find(ns, name string) (Pod, bool) {
	for _, p := range l.Items {
		if p.Metadata.Namespace == ns && p.Metadata.Name == name {
			return p, true
		}
	}
	return Pod{}, false
}
