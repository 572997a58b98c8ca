package ros1

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// goroslib v2.1.5 resolves NodeConf.Host to an IP address once and writes
// that address, never the name, wherever it tells others how to reach the
// node: the slave API and service URIs it registers with the master, and the
// TCPROS host it answers requestTopic with. So ROS_HOSTNAME=localhost was
// advertised as 127.0.0.1. Other ROS nodes advertise the name itself, which
// is what lets a name follow its machine; where the host is a name, the
// transport puts a hostRelay around goroslib that writes the name back.

// hostRelay is two rewriting proxies: one between goroslib and the master,
// which registers the node's URIs with the host name, and one in front of
// goroslib's slave API, which is the URI registered (its port stays the same
// across re-registrations) and names the host in requestTopic answers.
type hostRelay struct {
	host, ip  string
	masterURL string
	master    *rewritingProxy // goroslib → master
	front     *rewritingProxy // other nodes → goroslib's slave API
}

// newHostRelay starts a relay for host, or returns nil when host is empty or
// an IP address, which goroslib advertises as given.
func newHostRelay(host, master string) (*hostRelay, error) {
	if host == "" || net.ParseIP(host) != nil {
		return nil, nil
	}
	addr, err := net.ResolveTCPAddr("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("the node's host name %q (ROS_HOSTNAME) does not resolve: %w", host, err)
	}
	r := &hostRelay{host: host, ip: addr.IP.String(), masterURL: "http://" + master}
	if r.master, err = newRewritingProxy("127.0.0.1:0"); err != nil {
		return nil, err
	}
	if r.front, err = newRewritingProxy(net.JoinHostPort(r.ip, "0")); err != nil {
		r.master.Close()
		return nil, err
	}
	r.master.route(r.masterURL, nil, nil)
	return r, nil
}

// masterAddr is the address goroslib is given as the master's.
func (r *hostRelay) masterAddr() string { return r.master.ln.Addr().String() }

// route prepares the relay for a goroslib node whose slave API will listen
// on slavePort.
func (r *hostRelay) route(slavePort int) {
	ipPort, hostPort := net.JoinHostPort(r.ip, ""), net.JoinHostPort(r.host, "")
	slave := "http://" + net.JoinHostPort(r.ip, strconv.Itoa(slavePort))
	front := "http://" + net.JoinHostPort(r.host, strconv.Itoa(r.front.ln.Addr().(*net.TCPAddr).Port))
	// goroslib writes XML-RPC strings bare inside <value>, so the closing
	// tag pins each match to a whole value.
	r.master.route(r.masterURL, strings.NewReplacer(
		"<value>"+slave+"</value>", "<value>"+front+"</value>",
		"<value>"+slave+"/</value>", "<value>"+front+"/</value>",
		"<value>rosrpc://"+ipPort, "<value>rosrpc://"+hostPort,
	), nil)
	r.front.route(slave, nil, strings.NewReplacer(
		"<value>TCPROS</value><value>"+r.ip+"</value>", "<value>TCPROS</value><value>"+r.host+"</value>",
	))
}

// freePort finds a free TCP port on the relay's address for goroslib's
// slave API.
func (r *hostRelay) freePort() (int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(r.ip, "0"))
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Close stops both proxies.
func (r *hostRelay) Close() {
	r.master.Close()
	r.front.Close()
}

// maxRelayBody bounds one XML-RPC call or answer through the relay.
const maxRelayBody = 16 << 20

// rewritingProxy forwards XML-RPC over HTTP to a target, replacing strings
// in the request and the response bodies.
type rewritingProxy struct {
	ln     net.Listener
	srv    *http.Server
	client *http.Client

	mu       sync.Mutex
	target   string
	req, res *strings.Replacer // nil leaves the body as it is
}

func newRewritingProxy(listen string) (*rewritingProxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("starting the ROS host relay: %w", err)
	}
	p := &rewritingProxy{ln: ln, client: &http.Client{Timeout: 30 * time.Second}}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go p.srv.Serve(ln)
	return p, nil
}

func (p *rewritingProxy) route(target string, req, res *strings.Replacer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target, p.req, p.res = target, req, res
}

func (p *rewritingProxy) Close() error { return p.srv.Close() }

func readBounded(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxRelayBody+1))
	if err == nil && len(b) > maxRelayBody {
		err = fmt.Errorf("XML-RPC body over %d bytes", maxRelayBody)
	}
	return b, err
}

func replace(r *strings.Replacer, b []byte) []byte {
	if r == nil {
		return b
	}
	return []byte(r.Replace(string(b)))
}

func (p *rewritingProxy) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	p.mu.Lock()
	target, reqRw, resRw := p.target, p.req, p.res
	p.mu.Unlock()
	body, err := readBounded(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	out, err := http.NewRequestWithContext(req.Context(), req.Method, target+req.URL.RequestURI(), bytes.NewReader(replace(reqRw, body)))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	out.Header.Set("Content-Type", req.Header.Get("Content-Type"))
	res, err := p.client.Do(out)
	if err != nil {
		http.Error(w, "unreachable: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer res.Body.Close()
	answer, err := readBounded(res.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	w.Header().Set("Content-Type", res.Header.Get("Content-Type"))
	w.WriteHeader(res.StatusCode)
	w.Write(replace(resRw, answer))
}
