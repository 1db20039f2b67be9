"""Per-device latency models with conformal confidence (see the README and DESIGN)."""
