package ros1

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// goroslib v2.1.5 resolves NodeConf.Host to an IP address once and writes
// that address, never the name, into every URI it registers with the master
// (its slave API and its services), so ROS_HOSTNAME=localhost was advertised
// as 127.0.0.1. Other ROS nodes advertise the name itself, which is what lets
// a name follow its machine, so where the host is a name the transport puts
// a masterRelay between goroslib and the master that writes the name back
// into those URIs.

// maxRelayBody bounds one XML-RPC call through the relay.
const maxRelayBody = 16 << 20

// masterRelay forwards goroslib's XML-RPC calls to the master, with the
// node's URIs rewritten from the resolved IP to the host name.
type masterRelay struct {
	ip      string // the resolved address goroslib is given as its Host
	ln      net.Listener
	srv     *http.Server
	target  string // master URL
	client  *http.Client
	rewrite *strings.Replacer
}

// newMasterRelay starts a relay for host, or returns nil when host is empty
// or an IP address, which goroslib advertises as given.
func newMasterRelay(host, master string) (*masterRelay, error) {
	if host == "" || net.ParseIP(host) != nil {
		return nil, nil
	}
	addr, err := net.ResolveTCPAddr("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("the node's host name %q (ROS_HOSTNAME) does not resolve: %w", host, err)
	}
	ip := addr.IP.String()
	from, to := net.JoinHostPort(ip, ""), net.JoinHostPort(host, "")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("starting the ROS master relay: %w", err)
	}
	r := &masterRelay{
		ip:     ip,
		ln:     ln,
		target: "http://" + master,
		client: &http.Client{Timeout: 30 * time.Second},
		rewrite: strings.NewReplacer(
			"http://"+from, "http://"+to,
			"rosrpc://"+from, "rosrpc://"+to,
		),
	}
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	go r.srv.Serve(ln)
	return r, nil
}

// Addr is the relay's address, given to goroslib as the master's.
func (r *masterRelay) Addr() string { return r.ln.Addr().String() }

// Close stops the relay.
func (r *masterRelay) Close() error { return r.srv.Close() }

func (r *masterRelay) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, maxRelayBody+1))
	if err != nil || len(body) > maxRelayBody {
		http.Error(w, "unreadable or oversized XML-RPC call", http.StatusBadRequest)
		return
	}
	body = []byte(r.rewrite.Replace(string(body)))
	out, err := http.NewRequestWithContext(req.Context(), req.Method, r.target+req.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	out.Header.Set("Content-Type", req.Header.Get("Content-Type"))
	res, err := r.client.Do(out)
	if err != nil {
		http.Error(w, "ROS master unreachable: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer res.Body.Close()
	w.Header().Set("Content-Type", res.Header.Get("Content-Type"))
	w.WriteHeader(res.StatusCode)
	io.Copy(w, res.Body)
}
