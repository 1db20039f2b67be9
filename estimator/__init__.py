"""Per-device latency models with conformal confidence (see the README and DESIGN)."""
from . import accel as _accel

_accel.install()  # compiled hot modules, when built for their current sources (estimator.accel)
