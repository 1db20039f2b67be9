"""Hardware-aware NAS with Optuna: search spaces as code, torch -> ONNX -> onnxsim, latency
intervals through the estimation interface (:mod:`estimator.interface`: in-process by
default, the service's gRPC client with ``--service``), CM_LV feasibility, CM_O penalty,
zero-cost proxies, SQLite/PostgreSQL studies. See docs/nas.md.

Everything about latency comes through that interface; the search never reaches into the
estimator's models.
"""
