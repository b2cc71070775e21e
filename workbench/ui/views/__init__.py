"""One module per page: each exposes `render()`; the Tour reuses their parts."""
