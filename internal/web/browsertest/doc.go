// Package browsertest drives the dashboard (internal/web) in a headless
// Chromium, and its JSON API by role, against a real server. It is a
// module of its own so that the browser driver (chromedp) stays out of
// leasehold's dependencies; scripts/test.sh runs it. Without a chromium
// binary the browser tests are skipped on a developer machine and fail in
// CI (CI=true).
package browsertest
