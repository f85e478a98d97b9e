package supervisors

import (
	"embed"
	"io/fs"
	"net/http"
)

// The dashboard's page: plain HTML, CSS and one JavaScript module, embedded
// in the binary (no build step, nothing fetched from elsewhere at run time).
//
//go:embed dashboard
var dashboardFiles embed.FS

// pageCSP is the page's content security policy: everything from the node
// itself, no inline script or style, no framing.
const pageCSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// assetRoutes serves the page at / and its files under /assets/.
func (d *dashboard) assetRoutes(mux *http.ServeMux) {
	files, err := fs.Sub(dashboardFiles, "dashboard")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	static := http.StripPrefix("/assets/", http.FileServerFS(files))
	headers := func(w http.ResponseWriter) {
		w.Header().Set("Content-Security-Policy", pageCSP)
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		w.Header().Set("Cache-Control", "no-cache")
	}
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		headers(w)
		http.ServeFileFS(w, r, files, "index.html")
	})
	mux.HandleFunc("GET /assets/", func(w http.ResponseWriter, r *http.Request) {
		headers(w)
		static.ServeHTTP(w, r)
	})
}
