"""Hardware-aware NAS with Optuna: search spaces as code, torch -> ONNX -> onnxsim, latency
intervals from the estimation service (``nas -> service.client -> proto``), CM_LV
feasibility, CM_O penalty, zero-cost proxies, SQLite/PostgreSQL studies. See docs/nas.md.

Only :mod:`estimator.errors` and :mod:`estimator.cliutil` are imported from ``estimator``;
everything about latency comes from the service.
"""
