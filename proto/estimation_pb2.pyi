from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LayerSpec(_message.Message):
    __slots__ = ("type", "params", "name", "options")
    class ParamsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class OptionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TYPE_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    type: str
    params: _containers.ScalarMap[str, float]
    name: str
    options: _containers.ScalarMap[str, str]
    def __init__(self, type: _Optional[str] = ..., params: _Optional[_Mapping[str, float]] = ..., name: _Optional[str] = ..., options: _Optional[_Mapping[str, str]] = ...) -> None: ...

class LayerList(_message.Message):
    __slots__ = ("layers",)
    LAYERS_FIELD_NUMBER: _ClassVar[int]
    layers: _containers.RepeatedCompositeFieldContainer[LayerSpec]
    def __init__(self, layers: _Optional[_Iterable[_Union[LayerSpec, _Mapping]]] = ...) -> None: ...

class Shape(_message.Message):
    __slots__ = ("dims",)
    DIMS_FIELD_NUMBER: _ClassVar[int]
    dims: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, dims: _Optional[_Iterable[int]] = ...) -> None: ...

class Interval(_message.Message):
    __slots__ = ("metric", "confidence", "lower_ms", "upper_ms")
    METRIC_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    LOWER_MS_FIELD_NUMBER: _ClassVar[int]
    UPPER_MS_FIELD_NUMBER: _ClassVar[int]
    metric: str
    confidence: float
    lower_ms: float
    upper_ms: float
    def __init__(self, metric: _Optional[str] = ..., confidence: _Optional[float] = ..., lower_ms: _Optional[float] = ..., upper_ms: _Optional[float] = ...) -> None: ...

class LayerEstimate(_message.Message):
    __slots__ = ("name", "type", "op_type", "features", "prediction_ms", "intervals", "out_of_design_space", "fallback", "flags", "nodes", "ops", "activation", "ood_reasons", "t_op_ms", "error")
    class FeaturesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    OP_TYPE_FIELD_NUMBER: _ClassVar[int]
    FEATURES_FIELD_NUMBER: _ClassVar[int]
    PREDICTION_MS_FIELD_NUMBER: _ClassVar[int]
    INTERVALS_FIELD_NUMBER: _ClassVar[int]
    OUT_OF_DESIGN_SPACE_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    OPS_FIELD_NUMBER: _ClassVar[int]
    ACTIVATION_FIELD_NUMBER: _ClassVar[int]
    OOD_REASONS_FIELD_NUMBER: _ClassVar[int]
    T_OP_MS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: str
    op_type: str
    features: _containers.ScalarMap[str, float]
    prediction_ms: float
    intervals: _containers.RepeatedCompositeFieldContainer[Interval]
    out_of_design_space: bool
    fallback: bool
    flags: _containers.RepeatedScalarFieldContainer[str]
    nodes: _containers.RepeatedScalarFieldContainer[str]
    ops: float
    activation: str
    ood_reasons: _containers.RepeatedScalarFieldContainer[str]
    t_op_ms: float
    error: Error
    def __init__(self, name: _Optional[str] = ..., type: _Optional[str] = ..., op_type: _Optional[str] = ..., features: _Optional[_Mapping[str, float]] = ..., prediction_ms: _Optional[float] = ..., intervals: _Optional[_Iterable[_Union[Interval, _Mapping]]] = ..., out_of_design_space: _Optional[bool] = ..., fallback: _Optional[bool] = ..., flags: _Optional[_Iterable[str]] = ..., nodes: _Optional[_Iterable[str]] = ..., ops: _Optional[float] = ..., activation: _Optional[str] = ..., ood_reasons: _Optional[_Iterable[str]] = ..., t_op_ms: _Optional[float] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class Error(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class EstimateNetworkRequest(_message.Message):
    __slots__ = ("device", "onnx", "layers", "confidence", "per_layer", "input_shapes", "request_id", "name")
    class InputShapesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Shape
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Shape, _Mapping]] = ...) -> None: ...
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    ONNX_FIELD_NUMBER: _ClassVar[int]
    LAYERS_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    PER_LAYER_FIELD_NUMBER: _ClassVar[int]
    INPUT_SHAPES_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    device: str
    onnx: bytes
    layers: LayerList
    confidence: _containers.RepeatedScalarFieldContainer[float]
    per_layer: bool
    input_shapes: _containers.MessageMap[str, Shape]
    request_id: str
    name: str
    def __init__(self, device: _Optional[str] = ..., onnx: _Optional[bytes] = ..., layers: _Optional[_Union[LayerList, _Mapping]] = ..., confidence: _Optional[_Iterable[float]] = ..., per_layer: _Optional[bool] = ..., input_shapes: _Optional[_Mapping[str, Shape]] = ..., request_id: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class Calibration(_message.Message):
    __slots__ = ("applied", "reason", "method", "formula", "n_networks", "families", "kind", "runner", "runner_options", "source", "date", "validation", "cv_mean_abs_error_pct", "uncalibrated_mean_abs_error_pct", "in_scope")
    class RunnerOptionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    FORMULA_FIELD_NUMBER: _ClassVar[int]
    N_NETWORKS_FIELD_NUMBER: _ClassVar[int]
    FAMILIES_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    RUNNER_FIELD_NUMBER: _ClassVar[int]
    RUNNER_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    DATE_FIELD_NUMBER: _ClassVar[int]
    VALIDATION_FIELD_NUMBER: _ClassVar[int]
    CV_MEAN_ABS_ERROR_PCT_FIELD_NUMBER: _ClassVar[int]
    UNCALIBRATED_MEAN_ABS_ERROR_PCT_FIELD_NUMBER: _ClassVar[int]
    IN_SCOPE_FIELD_NUMBER: _ClassVar[int]
    applied: bool
    reason: str
    method: str
    formula: str
    n_networks: int
    families: _containers.RepeatedScalarFieldContainer[str]
    kind: str
    runner: str
    runner_options: _containers.ScalarMap[str, str]
    source: str
    date: str
    validation: str
    cv_mean_abs_error_pct: float
    uncalibrated_mean_abs_error_pct: float
    in_scope: bool
    def __init__(self, applied: _Optional[bool] = ..., reason: _Optional[str] = ..., method: _Optional[str] = ..., formula: _Optional[str] = ..., n_networks: _Optional[int] = ..., families: _Optional[_Iterable[str]] = ..., kind: _Optional[str] = ..., runner: _Optional[str] = ..., runner_options: _Optional[_Mapping[str, str]] = ..., source: _Optional[str] = ..., date: _Optional[str] = ..., validation: _Optional[str] = ..., cv_mean_abs_error_pct: _Optional[float] = ..., uncalibrated_mean_abs_error_pct: _Optional[float] = ..., in_scope: _Optional[bool] = ...) -> None: ...

class Refinement(_message.Message):
    __slots__ = ("configurations", "base", "targets", "excluded", "rounds", "device_seconds", "runner", "runner_options", "source", "date")
    class RunnerOptionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CONFIGURATIONS_FIELD_NUMBER: _ClassVar[int]
    BASE_FIELD_NUMBER: _ClassVar[int]
    TARGETS_FIELD_NUMBER: _ClassVar[int]
    EXCLUDED_FIELD_NUMBER: _ClassVar[int]
    ROUNDS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    RUNNER_FIELD_NUMBER: _ClassVar[int]
    RUNNER_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    DATE_FIELD_NUMBER: _ClassVar[int]
    configurations: int
    base: str
    targets: _containers.RepeatedScalarFieldContainer[str]
    excluded: _containers.RepeatedScalarFieldContainer[str]
    rounds: int
    device_seconds: float
    runner: str
    runner_options: _containers.ScalarMap[str, str]
    source: str
    date: str
    def __init__(self, configurations: _Optional[int] = ..., base: _Optional[str] = ..., targets: _Optional[_Iterable[str]] = ..., excluded: _Optional[_Iterable[str]] = ..., rounds: _Optional[int] = ..., device_seconds: _Optional[float] = ..., runner: _Optional[str] = ..., runner_options: _Optional[_Mapping[str, str]] = ..., source: _Optional[str] = ..., date: _Optional[str] = ...) -> None: ...

class FeatureOutOfRange(_message.Message):
    __slots__ = ("feature", "value", "min", "max")
    FEATURE_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    MIN_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    feature: str
    value: float
    min: float
    max: float
    def __init__(self, feature: _Optional[str] = ..., value: _Optional[float] = ..., min: _Optional[float] = ..., max: _Optional[float] = ...) -> None: ...

class CmoDriver(_message.Message):
    __slots__ = ("index", "name", "type", "op_type", "share", "prediction_ms", "cm_o_upper_ms", "confidence", "reasons", "out_of_range", "knn_ratio", "why")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    OP_TYPE_FIELD_NUMBER: _ClassVar[int]
    SHARE_FIELD_NUMBER: _ClassVar[int]
    PREDICTION_MS_FIELD_NUMBER: _ClassVar[int]
    CM_O_UPPER_MS_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    OUT_OF_RANGE_FIELD_NUMBER: _ClassVar[int]
    KNN_RATIO_FIELD_NUMBER: _ClassVar[int]
    WHY_FIELD_NUMBER: _ClassVar[int]
    index: int
    name: str
    type: str
    op_type: str
    share: float
    prediction_ms: float
    cm_o_upper_ms: float
    confidence: float
    reasons: _containers.RepeatedScalarFieldContainer[str]
    out_of_range: _containers.RepeatedCompositeFieldContainer[FeatureOutOfRange]
    knn_ratio: float
    why: str
    def __init__(self, index: _Optional[int] = ..., name: _Optional[str] = ..., type: _Optional[str] = ..., op_type: _Optional[str] = ..., share: _Optional[float] = ..., prediction_ms: _Optional[float] = ..., cm_o_upper_ms: _Optional[float] = ..., confidence: _Optional[float] = ..., reasons: _Optional[_Iterable[str]] = ..., out_of_range: _Optional[_Iterable[_Union[FeatureOutOfRange, _Mapping]]] = ..., knn_ratio: _Optional[float] = ..., why: _Optional[str] = ...) -> None: ...

class Uncalibrated(_message.Message):
    __slots__ = ("total_ms", "intervals")
    TOTAL_MS_FIELD_NUMBER: _ClassVar[int]
    INTERVALS_FIELD_NUMBER: _ClassVar[int]
    total_ms: float
    intervals: _containers.RepeatedCompositeFieldContainer[Interval]
    def __init__(self, total_ms: _Optional[float] = ..., intervals: _Optional[_Iterable[_Union[Interval, _Mapping]]] = ...) -> None: ...

class EstimateNetworkResponse(_message.Message):
    __slots__ = ("device", "total_ms", "intervals", "layers", "warnings", "n_layers", "n_out_of_design_space", "n_fallback", "model_version", "cached", "request_id", "server_time_ms", "error", "confidence", "name", "uncalibrated", "calibration", "cm_o_drivers")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_MS_FIELD_NUMBER: _ClassVar[int]
    INTERVALS_FIELD_NUMBER: _ClassVar[int]
    LAYERS_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    N_LAYERS_FIELD_NUMBER: _ClassVar[int]
    N_OUT_OF_DESIGN_SPACE_FIELD_NUMBER: _ClassVar[int]
    N_FALLBACK_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    CACHED_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SERVER_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    UNCALIBRATED_FIELD_NUMBER: _ClassVar[int]
    CALIBRATION_FIELD_NUMBER: _ClassVar[int]
    CM_O_DRIVERS_FIELD_NUMBER: _ClassVar[int]
    device: str
    total_ms: float
    intervals: _containers.RepeatedCompositeFieldContainer[Interval]
    layers: _containers.RepeatedCompositeFieldContainer[LayerEstimate]
    warnings: _containers.RepeatedScalarFieldContainer[str]
    n_layers: int
    n_out_of_design_space: int
    n_fallback: int
    model_version: str
    cached: bool
    request_id: str
    server_time_ms: float
    error: Error
    confidence: _containers.RepeatedScalarFieldContainer[float]
    name: str
    uncalibrated: Uncalibrated
    calibration: Calibration
    cm_o_drivers: _containers.RepeatedCompositeFieldContainer[CmoDriver]
    def __init__(self, device: _Optional[str] = ..., total_ms: _Optional[float] = ..., intervals: _Optional[_Iterable[_Union[Interval, _Mapping]]] = ..., layers: _Optional[_Iterable[_Union[LayerEstimate, _Mapping]]] = ..., warnings: _Optional[_Iterable[str]] = ..., n_layers: _Optional[int] = ..., n_out_of_design_space: _Optional[int] = ..., n_fallback: _Optional[int] = ..., model_version: _Optional[str] = ..., cached: _Optional[bool] = ..., request_id: _Optional[str] = ..., server_time_ms: _Optional[float] = ..., error: _Optional[_Union[Error, _Mapping]] = ..., confidence: _Optional[_Iterable[float]] = ..., name: _Optional[str] = ..., uncalibrated: _Optional[_Union[Uncalibrated, _Mapping]] = ..., calibration: _Optional[_Union[Calibration, _Mapping]] = ..., cm_o_drivers: _Optional[_Iterable[_Union[CmoDriver, _Mapping]]] = ...) -> None: ...

class EstimateLayersRequest(_message.Message):
    __slots__ = ("device", "layers", "confidence")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    LAYERS_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    device: str
    layers: _containers.RepeatedCompositeFieldContainer[LayerSpec]
    confidence: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, device: _Optional[str] = ..., layers: _Optional[_Iterable[_Union[LayerSpec, _Mapping]]] = ..., confidence: _Optional[_Iterable[float]] = ...) -> None: ...

class EstimateLayersResponse(_message.Message):
    __slots__ = ("layers", "model_version", "server_time_ms", "warnings", "device")
    LAYERS_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    SERVER_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    layers: _containers.RepeatedCompositeFieldContainer[LayerEstimate]
    model_version: str
    server_time_ms: float
    warnings: _containers.RepeatedScalarFieldContainer[str]
    device: str
    def __init__(self, layers: _Optional[_Iterable[_Union[LayerEstimate, _Mapping]]] = ..., model_version: _Optional[str] = ..., server_time_ms: _Optional[float] = ..., warnings: _Optional[_Iterable[str]] = ..., device: _Optional[str] = ...) -> None: ...

class ListDevicesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Provenance(_message.Message):
    __slots__ = ("kind", "source", "host", "versions", "date")
    class VersionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    KIND_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    DATE_FIELD_NUMBER: _ClassVar[int]
    kind: str
    source: str
    host: str
    versions: _containers.ScalarMap[str, str]
    date: str
    def __init__(self, kind: _Optional[str] = ..., source: _Optional[str] = ..., host: _Optional[str] = ..., versions: _Optional[_Mapping[str, str]] = ..., date: _Optional[str] = ...) -> None: ...

class FeatureRange(_message.Message):
    __slots__ = ("feature", "min", "max")
    FEATURE_FIELD_NUMBER: _ClassVar[int]
    MIN_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    feature: str
    min: float
    max: float
    def __init__(self, feature: _Optional[str] = ..., min: _Optional[float] = ..., max: _Optional[float] = ...) -> None: ...

class LayerTypeCoverage(_message.Message):
    __slots__ = ("type", "n_samples", "ranges")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    N_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    RANGES_FIELD_NUMBER: _ClassVar[int]
    type: str
    n_samples: int
    ranges: _containers.RepeatedCompositeFieldContainer[FeatureRange]
    def __init__(self, type: _Optional[str] = ..., n_samples: _Optional[int] = ..., ranges: _Optional[_Iterable[_Union[FeatureRange, _Mapping]]] = ...) -> None: ...

class DeviceInfo(_message.Message):
    __slots__ = ("name", "hardware", "runner", "precision", "provenance", "coverage", "model_version", "threads", "description", "target", "fallback_types", "cpu_fallback_ops", "calibration", "host_warnings", "refined")
    NAME_FIELD_NUMBER: _ClassVar[int]
    HARDWARE_FIELD_NUMBER: _ClassVar[int]
    RUNNER_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    COVERAGE_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    THREADS_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_TYPES_FIELD_NUMBER: _ClassVar[int]
    CPU_FALLBACK_OPS_FIELD_NUMBER: _ClassVar[int]
    CALIBRATION_FIELD_NUMBER: _ClassVar[int]
    HOST_WARNINGS_FIELD_NUMBER: _ClassVar[int]
    REFINED_FIELD_NUMBER: _ClassVar[int]
    name: str
    hardware: str
    runner: str
    precision: str
    provenance: Provenance
    coverage: _containers.RepeatedCompositeFieldContainer[LayerTypeCoverage]
    model_version: str
    threads: int
    description: str
    target: str
    fallback_types: _containers.RepeatedScalarFieldContainer[str]
    cpu_fallback_ops: _containers.RepeatedScalarFieldContainer[str]
    calibration: Calibration
    host_warnings: _containers.RepeatedScalarFieldContainer[str]
    refined: Refinement
    def __init__(self, name: _Optional[str] = ..., hardware: _Optional[str] = ..., runner: _Optional[str] = ..., precision: _Optional[str] = ..., provenance: _Optional[_Union[Provenance, _Mapping]] = ..., coverage: _Optional[_Iterable[_Union[LayerTypeCoverage, _Mapping]]] = ..., model_version: _Optional[str] = ..., threads: _Optional[int] = ..., description: _Optional[str] = ..., target: _Optional[str] = ..., fallback_types: _Optional[_Iterable[str]] = ..., cpu_fallback_ops: _Optional[_Iterable[str]] = ..., calibration: _Optional[_Union[Calibration, _Mapping]] = ..., host_warnings: _Optional[_Iterable[str]] = ..., refined: _Optional[_Union[Refinement, _Mapping]] = ...) -> None: ...

class ServerLimits(_message.Message):
    __slots__ = ("max_message_bytes", "max_onnx_bytes", "max_layers", "max_confidence_levels")
    MAX_MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_ONNX_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_LAYERS_FIELD_NUMBER: _ClassVar[int]
    MAX_CONFIDENCE_LEVELS_FIELD_NUMBER: _ClassVar[int]
    max_message_bytes: int
    max_onnx_bytes: int
    max_layers: int
    max_confidence_levels: int
    def __init__(self, max_message_bytes: _Optional[int] = ..., max_onnx_bytes: _Optional[int] = ..., max_layers: _Optional[int] = ..., max_confidence_levels: _Optional[int] = ...) -> None: ...

class ListDevicesResponse(_message.Message):
    __slots__ = ("devices", "errors", "generation", "limits")
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    devices: _containers.RepeatedCompositeFieldContainer[DeviceInfo]
    errors: _containers.RepeatedScalarFieldContainer[str]
    generation: int
    limits: ServerLimits
    def __init__(self, devices: _Optional[_Iterable[_Union[DeviceInfo, _Mapping]]] = ..., errors: _Optional[_Iterable[str]] = ..., generation: _Optional[int] = ..., limits: _Optional[_Union[ServerLimits, _Mapping]] = ...) -> None: ...

class ReloadProfilesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReloadProfilesResponse(_message.Message):
    __slots__ = ("devices", "errors", "generation")
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    devices: _containers.RepeatedScalarFieldContainer[str]
    errors: _containers.RepeatedScalarFieldContainer[str]
    generation: int
    def __init__(self, devices: _Optional[_Iterable[str]] = ..., errors: _Optional[_Iterable[str]] = ..., generation: _Optional[int] = ...) -> None: ...
