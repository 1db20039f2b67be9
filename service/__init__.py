"""The gRPC estimation service (see docs/service.md)."""
