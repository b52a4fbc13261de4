// Package chaos is an in-process TCP proxy that tests put between a client
// and a shared service (Postgres, RabbitMQ) to simulate an outage of that
// service without touching it: the machine's services stay up for every
// other test while one test cuts its own path to them.
//
// A [Proxy] listens on 127.0.0.1:0 and forwards each connection to its
// target. [Proxy.Cut] models the service going down (stopped, crashed,
// restarted): every live connection is reset at once and every new one is
// accepted and reset straight away, so clients see their calls fail and
// their redials fail, quickly, as they would against a stopped server.
// [Proxy.Restore] lets new connections through again; clients recover by
// reconnecting, exactly as after a real restart. A network partition (a
// black hole where packets vanish and calls hang until a timeout) is not
// modelled: what a client does then depends on its TCP and keepalive
// timeouts, which makes tests slow and proves little more than the cut.
//
// Why not toxiproxy: it is a separate server (or a large dependency) with
// an HTTP control API, latency and bandwidth toxics we do not need. A
// proxy of a hundred lines without dependencies, that a test can cut and
// restore with a method call and that shuts down without leaking a
// goroutine, is all the outage tests need.
package chaos
