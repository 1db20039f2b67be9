from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DescribeRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DescribeResponse(_message.Message):
    __slots__ = ("runner", "model_format", "provenance", "environment_json", "max_model_bytes", "max_warmup", "max_runs", "agent_version")
    RUNNER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FORMAT_FIELD_NUMBER: _ClassVar[int]
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_JSON_FIELD_NUMBER: _ClassVar[int]
    MAX_MODEL_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_WARMUP_FIELD_NUMBER: _ClassVar[int]
    MAX_RUNS_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    runner: str
    model_format: str
    provenance: str
    environment_json: str
    max_model_bytes: int
    max_warmup: int
    max_runs: int
    agent_version: str
    def __init__(self, runner: _Optional[str] = ..., model_format: _Optional[str] = ..., provenance: _Optional[str] = ..., environment_json: _Optional[str] = ..., max_model_bytes: _Optional[int] = ..., max_warmup: _Optional[int] = ..., max_runs: _Optional[int] = ..., agent_version: _Optional[str] = ...) -> None: ...

class TimeRequest(_message.Message):
    __slots__ = ("model", "model_format", "warmup", "runs", "per_layer")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MODEL_FORMAT_FIELD_NUMBER: _ClassVar[int]
    WARMUP_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    PER_LAYER_FIELD_NUMBER: _ClassVar[int]
    model: bytes
    model_format: str
    warmup: int
    runs: int
    per_layer: bool
    def __init__(self, model: _Optional[bytes] = ..., model_format: _Optional[str] = ..., warmup: _Optional[int] = ..., runs: _Optional[int] = ..., per_layer: _Optional[bool] = ...) -> None: ...

class Timing(_message.Message):
    __slots__ = ("median_ms", "p10_ms", "p90_ms", "mad_ms", "mean_ms", "std_ms", "min_ms", "n")
    MEDIAN_MS_FIELD_NUMBER: _ClassVar[int]
    P10_MS_FIELD_NUMBER: _ClassVar[int]
    P90_MS_FIELD_NUMBER: _ClassVar[int]
    MAD_MS_FIELD_NUMBER: _ClassVar[int]
    MEAN_MS_FIELD_NUMBER: _ClassVar[int]
    STD_MS_FIELD_NUMBER: _ClassVar[int]
    MIN_MS_FIELD_NUMBER: _ClassVar[int]
    N_FIELD_NUMBER: _ClassVar[int]
    median_ms: float
    p10_ms: float
    p90_ms: float
    mad_ms: float
    mean_ms: float
    std_ms: float
    min_ms: float
    n: int
    def __init__(self, median_ms: _Optional[float] = ..., p10_ms: _Optional[float] = ..., p90_ms: _Optional[float] = ..., mad_ms: _Optional[float] = ..., mean_ms: _Optional[float] = ..., std_ms: _Optional[float] = ..., min_ms: _Optional[float] = ..., n: _Optional[int] = ...) -> None: ...

class TimeResponse(_message.Message):
    __slots__ = ("timing", "per_layer_ms", "per_layer_error", "info_json", "prepare_ms", "model_sha256")
    class PerLayerMsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    TIMING_FIELD_NUMBER: _ClassVar[int]
    PER_LAYER_MS_FIELD_NUMBER: _ClassVar[int]
    PER_LAYER_ERROR_FIELD_NUMBER: _ClassVar[int]
    INFO_JSON_FIELD_NUMBER: _ClassVar[int]
    PREPARE_MS_FIELD_NUMBER: _ClassVar[int]
    MODEL_SHA256_FIELD_NUMBER: _ClassVar[int]
    timing: Timing
    per_layer_ms: _containers.ScalarMap[str, float]
    per_layer_error: str
    info_json: str
    prepare_ms: float
    model_sha256: str
    def __init__(self, timing: _Optional[_Union[Timing, _Mapping]] = ..., per_layer_ms: _Optional[_Mapping[str, float]] = ..., per_layer_error: _Optional[str] = ..., info_json: _Optional[str] = ..., prepare_ms: _Optional[float] = ..., model_sha256: _Optional[str] = ...) -> None: ...
