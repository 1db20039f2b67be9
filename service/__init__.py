"""The gRPC estimation service (see docs/service.md)."""
import estimator as _estimator  # noqa: F401 (installs estimator.accel's finder before service.server loads)
