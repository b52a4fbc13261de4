// Package transporttest is the conformance suite every transport adapter
// passes. An adapter's test calls Run with a Factory that builds its
// publishers and subscribers and a Features value that declares what the
// adapter guarantees; checks for features an adapter lacks are skipped.
package transporttest
