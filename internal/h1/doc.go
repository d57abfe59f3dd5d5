// Package h1 is fetch's own HTTP/1.1 client, for plain http:// requests
// without a body, sent direct or through an http:// proxy (in absolute
// form), on kept-alive connections. Everything else (https, SOCKS, CONNECT
// tunnels, HTTP/2) is net/http's; Client.Takes tells which a request is.
// The engine holds one Client for direct routes and one for http://
// proxies, and cannot tell their responses from net/http's.
//
// Why: net/http's transport hands every request to two goroutines of its
// connection (one writes it, one reads the answer) and back, over channels
// it makes for each request. Here the goroutine that calls RoundTrip
// writes the request and reads the answer itself, on a connection it holds
// until the body is read or closed. On loopback that is about a third of
// fetch's CPU per URL. What it reads and writes is net/http's own, or byte
// for byte what it writes and reads (see writeRequest and readResponse):
// http.ReadResponse does the framing (Content-Length, chunked, to the end
// of the connection, none for HEAD, 204 and 304). Its errors are net/http's
// too, word for word, and typed as net/http's are (*net.OpError,
// io.ErrUnexpectedEOF, errors wrapped with %w), or HeadersTooLargeError
// where net/http gives its own no type: a caller classifies them with
// errors.Is and errors.As, never by their text.
//
// It does what the transport does for such requests: the httptrace hooks
// (GetConn, GotConn, WroteRequest, GotFirstResponseByte; the dialer calls
// the dial hooks), response headers bounded by Options.MaxHeader (1xx
// answers skipped, within the same bound), a look at an idle connection
// before it is used again (see take), a request sent again on a new
// connection when a kept-alive one closes under it before any byte of the
// answer (see replayable), no request sent once its context is done, a
// done context that ends any wait at once (see connwatch), and idle
// connections bounded per key (target or proxy) and in all, the least
// recently used closed first. A connection is kept only when its answer
// was read to the end and neither side asked to close it. What the
// httptrace hooks do not say, whether a read waits for the body too, it
// tells the caller's Hooks.
package h1
