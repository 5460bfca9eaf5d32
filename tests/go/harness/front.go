package main

import (
	"bytes"
	"crypto/tls"
	"errors"
	"flag"
	"io"
	"log"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// front stands in for a Service Bus namespace's one host name: the SDK dials the same host
// for AMQP (amqps://HOST/, port 5671) and for the administration API (https://HOST/, 443),
// where Tidebus has two listeners. It listens on the given addresses, passes each
// connection's bytes through unchanged (TLS is Tidebus's own, end to end) and picks the
// listener by the TLS ClientHello: one offering an HTTP ALPN protocol (Go's net/http offers h2
// and http/1.1; go-amqp offers none) goes to the administration listener, anything else
// (AMQPS, plain AMQP) to the AMQP listener.
func front(args []string) error {
	flags := flag.NewFlagSet("front", flag.ExitOnError)
	listen := flags.String("listen", "127.0.0.1:0", "addresses to listen on, comma-separated")
	amqpAddr := flags.String("amqp", "", "Tidebus's AMQP listener (serves AMQP and AMQPS)")
	adminAddr := flags.String("admin", "", "Tidebus's administration listener (HTTPS)")
	ready := flags.String("ready-file", "", "written with the bound addresses once listening")
	_ = flags.Parse(args)
	if *amqpAddr == "" || *adminAddr == "" {
		return errors.New("front: -amqp and -admin are required")
	}
	var listeners []net.Listener
	var bound []string
	for _, addr := range strings.Split(*listen, ",") {
		listener, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		listeners = append(listeners, listener)
		bound = append(bound, listener.Addr().String())
	}
	if *ready != "" {
		tmp := *ready + ".tmp"
		if err := os.WriteFile(tmp, []byte(strings.Join(bound, "\n")+"\n"), 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, *ready); err != nil {
			return err
		}
	}
	errs := make(chan error, len(listeners))
	for _, listener := range listeners {
		go func() {
			for {
				conn, err := listener.Accept()
				if err != nil {
					errs <- err
					return
				}
				go serve(conn, *amqpAddr, *adminAddr)
			}
		}()
	}
	return <-errs
}

func serve(client net.Conn, amqpAddr, adminAddr string) {
	defer client.Close()
	_ = client.SetReadDeadline(time.Now().Add(30 * time.Second))
	first := make([]byte, 1)
	if _, err := io.ReadFull(client, first); err != nil {
		return
	}
	// Every byte read from the client is kept in seen and sent upstream first.
	var seen bytes.Buffer
	target := amqpAddr
	if first[0] == 0x16 { // a TLS handshake record: the ClientHello
		protos := clientHelloALPN(io.TeeReader(io.MultiReader(bytes.NewReader(first), client), &seen))
		if slices.Contains(protos, "http/1.1") || slices.Contains(protos, "h2") {
			target = adminAddr
		}
	} else {
		seen.Write(first)
	}
	_ = client.SetReadDeadline(time.Time{})
	upstream, err := net.Dial("tcp", target)
	if err != nil {
		log.Printf("front: dialing %s: %v", target, err)
		return
	}
	defer upstream.Close()
	if _, err := upstream.Write(seen.Bytes()); err != nil {
		return
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(upstream, client)
		if tcp, ok := upstream.(*net.TCPConn); ok {
			_ = tcp.CloseWrite()
		}
	}()
	_, _ = io.Copy(client, upstream)
	if tcp, ok := client.(*net.TCPConn); ok {
		_ = tcp.CloseWrite()
	}
	wg.Wait()
}

var errSeen = errors.New("client hello read")

// clientHelloALPN reads a TLS ClientHello from r with crypto/tls's own parser (a server
// handshake stopped at GetConfigForClient) and returns the ALPN protocols it offers.
func clientHelloALPN(r io.Reader) []string {
	var protos []string
	server := tls.Server(readOnly{r}, &tls.Config{
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			protos = slices.Clone(hello.SupportedProtos)
			return nil, errSeen
		},
	})
	_ = server.Handshake()
	return protos
}

// readOnly is a net.Conn that reads from a reader and refuses writes (the stopped handshake
// would write an alert).
type readOnly struct{ r io.Reader }

func (c readOnly) Read(p []byte) (int, error)         { return c.r.Read(p) }
func (c readOnly) Write(p []byte) (int, error)        { return 0, io.ErrClosedPipe }
func (c readOnly) Close() error                       { return nil }
func (c readOnly) LocalAddr() net.Addr                { return nil }
func (c readOnly) RemoteAddr() net.Addr               { return nil }
func (c readOnly) SetDeadline(t time.Time) error      { return nil }
func (c readOnly) SetReadDeadline(t time.Time) error  { return nil }
func (c readOnly) SetWriteDeadline(t time.Time) error { return nil }
