# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Native fast path of :func:`estimator.onnx_import.load_network` (typed Cython, an optional
extension that ``pip install`` builds where a C compiler exists: setup.py; found by
:func:`estimator.onnx_import.native_core`).

:func:`extract` decodes the ONNX protobuf wire format itself, maps tensor names to integer
ids once, and runs the importer's per-node work on typed arrays: the validation checks,
the shape propagation of :mod:`estimator.onnx_shapes`, the extractor's aliases, live
nodes, consumers and static tensors, the drafts of :class:`estimator.onnx_import._Extractor`
and the fusion of activations. It covers the graphs the service sees most (stripped
MobileNet-class networks: Conv, Clip/Relu/HardSwish/HardSigmoid/Sigmoid(+Mul)/Tanh/LeakyRelu,
Add/Sub/Mul/Div, Global/Max/Average pooling, ReduceMean/ReduceMax over H, W, Flatten,
Reshape, Gemm, Concat, Constant, Identity, Dropout) in the case where the Python path
skips onnxsim because initializers carry no data.

Whatever it does not reproduce exactly (another operator or attribute, batch > 1, a graph
not in topological order, an unnamed node, a shape the Python propagation would not
compute, malformed bytes, ...) makes it return ``None``: the caller then runs the Python
importer, which gives the answer (or the precise error). Every read of the input is
bounds-checked. The layers and the network are built by the Python code (``_finish_layer``,
``_network`` in :mod:`estimator.onnx_import`) from the drafts returned here.
"""
from libc.stdint cimport uint8_t, uint64_t, int64_t
from libc.string cimport memcmp, memcpy, memset
from libc.stdlib cimport malloc, realloc, free
from libc.math cimport INFINITY, fabs

from estimator.layers import LayerType
from estimator import onnx_import as _oi

cdef enum:
    MAXR = 8
    MAX_INIT_VALUE_BYTES = 2048  # a valued initializer message longer than this: unsure (stripping at 4096)

cdef enum:
    OP_OTHER = 0
    OP_CONV
    OP_CLIP
    OP_RELU
    OP_SIGMOID
    OP_HARDSIGMOID
    OP_HARDSWISH
    OP_TANH
    OP_LEAKYRELU
    OP_ADD
    OP_SUB
    OP_MUL
    OP_DIV
    OP_GAP
    OP_GMP
    OP_REDUCEMEAN
    OP_REDUCEMAX
    OP_FLATTEN
    OP_RESHAPE
    OP_GEMM
    OP_MAXPOOL
    OP_AVGPOOL
    OP_CONCAT
    OP_CONSTANT
    OP_IDENTITY
    OP_DROPOUT

# attribute bits
cdef enum:
    A_GROUP = 1 << 0
    A_STRIDES = 1 << 1
    A_DILATIONS = 1 << 2
    A_PADS = 1 << 3
    A_KSHAPE = 1 << 4
    A_AUTOPAD = 1 << 5
    A_AXIS = 1 << 6
    A_TRANSA = 1 << 7
    A_TRANSB = 1 << 8
    A_MIN = 1 << 9
    A_MAX = 1 << 10
    A_ALPHA = 1 << 11
    A_BETA = 1 << 12
    A_AXES = 1 << 13
    A_KEEPDIMS = 1 << 14
    A_ALLOWZERO = 1 << 15
    A_CEIL = 1 << 16
    A_VALUE = 1 << 17
    A_COUNTPAD = 1 << 18
    A_STORAGE = 1 << 19
    A_RATIO = 1 << 20
    A_SEED = 1 << 21

# AttributeProto.AttributeType
cdef enum:
    AT_FLOAT = 1
    AT_INT = 2
    AT_STRING = 3
    AT_TENSOR = 4
    AT_INTS = 7

cdef enum:
    AP_NOTSET = 0
    AP_SAME_UPPER = 1
    AP_SAME_LOWER = 2
    AP_VALID = 3

# layer types (index into _TYPES)
cdef enum:
    L_CONV2D = 0
    L_DWCONV2D
    L_FC
    L_ADD
    L_MUL
    L_GLOBALPOOL
    L_MAXPOOL
    L_AVGPOOL
    L_CONCAT
    L_RESHAPE
    L_ACT
    N_LTYPES

# activation kinds (index into _KINDS; 0: none)
cdef enum:
    K_NONE = 0
    K_RELU
    K_RELU6
    K_CLIP
    K_SIGMOID
    K_HARDSIGMOID
    K_HARDSWISH
    K_SILU
    K_TANH
    K_LEAKYRELU
    N_KINDS

_TYPES = (LayerType.CONV2D, LayerType.DWCONV2D, LayerType.FC, LayerType.ADD, LayerType.MUL, LayerType.GLOBALPOOL,
          LayerType.MAXPOOL, LayerType.AVGPOOL, LayerType.CONCAT, LayerType.RESHAPE, LayerType.ACTIVATION)
_KINDS = (None, "relu", "relu6", "clip", "sigmoid", "hardsigmoid", "hardswish", "silu", "tanh", "leakyrelu")
_OP_NAMES = ("", "Conv", "Clip", "Relu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "LeakyRelu", "Add", "Sub",
             "Mul", "Div", "GlobalAveragePool", "GlobalMaxPool", "ReduceMean", "ReduceMax", "Flatten", "Reshape",
             "Gemm", "MaxPool", "AveragePool", "Concat", "Constant", "Identity", "Dropout")


class GiveUp(Exception):
    """The graph is outside what the native core reproduces exactly."""


# ------------------------------------------------------------------ structs

cdef struct Rd:
    const uint8_t* p
    const uint8_t* end
    int err

cdef struct TInfo:  # a parsed TensorProto
    const uint8_t* name
    int nlen
    int rank
    int64_t dims[MAXR]
    int dtype
    int dataless
    int vstate          # 0 no value (definite), 1 values known, 2 unsure
    int nval
    int is_int
    double vals[MAXR]
    int64_t ivals[MAXR]

cdef struct Tens:
    const uint8_t* name
    int nlen
    uint64_t hash
    int rank                # -1 unknown
    int64_t dims[MAXR]
    uint8_t is_init
    uint8_t is_input        # graph input (not an initializer)
    uint8_t is_static
    uint8_t is_gout         # canonical graph output
    uint8_t needed
    uint8_t defined
    uint8_t const_src       # initializer or Constant output: its value is as below
    int producer
    int ncons
    int cons1
    int cons2
    int alias
    int vstate
    int nval
    int is_int
    double vals[MAXR]
    int64_t ivals[MAXR]

cdef struct Node:
    int op
    int in0
    int nin
    int out0
    int nout
    const uint8_t* name
    int nlen
    int has_op
    int live
    int noop                # 0, or 1 + the index of its reason
    int claimed
    int attrs               # A_* bits seen
    int64_t group
    int nk
    int64_t k[MAXR]
    int ns
    int64_t s[MAXR]
    int ndl
    int64_t dl[MAXR]
    int npads
    int64_t pads[2 * MAXR]
    int naxes
    int64_t axes[MAXR]
    int auto_pad
    int64_t axis
    int64_t transA
    int64_t transB
    int64_t keepdims
    int64_t allowzero
    int64_t ceil_mode
    double amin
    double amax
    double alpha
    double beta
    TInfo cval              # Constant's value

cdef struct Draft:
    int type
    int node
    int node2               # an absorbed node (SiLU/HardSwish Mul) or -1
    int fused_node          # the node of a fused activation or -1
    int fused_node2
    int kind
    int act
    int out0                # (canonical) single output
    int64_t p[20]
    int np
    int flag_auto_pad
    int flag_const
    int check_shape
    int dead

cdef struct Ctx:
    Tens* T
    int nt
    int tcap
    int* hslot
    int hmask
    Node* N
    int nn
    int ncap
    int* ins
    int nins
    int icap
    int* outs
    int nouts
    int ocap
    int* gin
    int ngin
    int gincap
    int* gout
    int ngout
    int goutcap
    int* vinfo              # value_info tensors
    int nvinfo
    int vinfocap
    int64_t* decl           # declared dims of graph outputs and value_info: rank (-1: none) then MAXR dims
    int ndecl
    int declcap
    int64_t ir_version
    int64_t opset
    int has_opset
    int has_graph
    const uint8_t* gp
    const uint8_t* gend
    const uint8_t* gname
    int gnlen
    int ndataless
    const uint8_t* first_dataless
    int first_dataless_len

# ------------------------------------------------------------------ wire format

cdef inline uint64_t varint(Rd* r) noexcept nogil:
    cdef uint64_t v = 0
    cdef int shift = 0
    cdef uint8_t b
    while r.p < r.end:
        b = r.p[0]
        r.p += 1
        v |= (<uint64_t>(b & 0x7f)) << shift
        if b < 0x80:
            return v
        shift += 7
        if shift >= 64:
            break
    r.err = 1
    r.p = r.end
    return 0

cdef inline void skip(Rd* r, int wt) noexcept nogil:
    cdef uint64_t n
    if wt == 0:
        varint(r)
    elif wt == 1:
        if r.end - r.p < 8:
            r.err = 1
            r.p = r.end
        else:
            r.p += 8
    elif wt == 2:
        n = varint(r)
        if r.err or n > <uint64_t>(r.end - r.p):
            r.err = 1
            r.p = r.end
        else:
            r.p += n
    elif wt == 5:
        if r.end - r.p < 4:
            r.err = 1
            r.p = r.end
        else:
            r.p += 4
    else:  # groups (3, 4) and invalid wire types: not handled
        r.err = 1
        r.p = r.end

cdef inline int sub(Rd* r, Rd* s, int wt) noexcept nogil:
    """Length-delimited field -> sub-reader; returns 0 (and sets r.err) on error."""
    cdef uint64_t n
    s.p = r.end
    s.end = r.end
    s.err = 1
    if wt != 2:
        r.err = 1
        r.p = r.end
        return 0
    n = varint(r)
    if r.err or n > <uint64_t>(r.end - r.p):
        r.err = 1
        r.p = r.end
        return 0
    s.p = r.p
    s.end = r.p + n
    s.err = 0
    r.p += n
    return 1

cdef inline float rd_f32(Rd* r) noexcept nogil:
    cdef float f = 0
    if r.end - r.p < 4:
        r.err = 1
        r.p = r.end
        return 0
    memcpy(&f, r.p, 4)
    r.p += 4
    return f

cdef inline double rd_f64(Rd* r) noexcept nogil:
    cdef double f = 0
    if r.end - r.p < 8:
        r.err = 1
        r.p = r.end
        return 0
    memcpy(&f, r.p, 8)
    r.p += 8
    return f

cdef int rd_ints(Rd* r, int wt, int64_t* out, int* n, int cap) noexcept nogil:
    """A repeated int64 field, packed (wt 2) or not (wt 0), appended to out[*n]; -1 when
    more than cap values (or a wire error: r.err is set)."""
    cdef Rd s
    if wt == 0:
        if n[0] >= cap:
            return -1
        out[n[0]] = <int64_t>varint(r)
        n[0] += 1
        return 0
    if not sub(r, &s, wt):
        return -1
    while s.p < s.end:
        if n[0] >= cap:
            return -1
        out[n[0]] = <int64_t>varint(&s)
        n[0] += 1
    if s.err:
        r.err = 1
        return -1
    return 0

cdef int count_packed(Rd* r, int wt, int width, int* count) noexcept nogil:
    """Count the elements of a repeated numeric field (width 0: varints, else fixed bytes)."""
    cdef Rd s
    if wt == 2:
        if not sub(r, &s, wt):
            return -1
        if width:
            if (s.end - s.p) % width:
                return -1
            count[0] += <int>((s.end - s.p) // width)
            return 0
        while s.p < s.end:
            varint(&s)
            if s.err:
                return -1
            count[0] += 1
        return 0
    if (width == 0 and wt == 0) or (width == 4 and wt == 5) or (width == 8 and wt == 1):
        skip(r, wt)
        count[0] += 1
        return -1 if r.err else 0
    return -1

cdef bint utf8_ok(const uint8_t* s, int n) noexcept nogil:
    cdef int i = 0, k, j
    cdef uint8_t b
    cdef uint64_t cp
    while i < n:
        b = s[i]
        if b < 0x80:
            i += 1
            continue
        if b >= 0xc2 and b <= 0xdf:
            k = 1
            cp = b & 0x1f
        elif b >= 0xe0 and b <= 0xef:
            k = 2
            cp = b & 0x0f
        elif b >= 0xf0 and b <= 0xf4:
            k = 3
            cp = b & 0x07
        else:
            return 0
        if i + k > n - 1:
            return 0
        for j in range(1, k + 1):
            if (s[i + j] & 0xc0) != 0x80:
                return 0
            cp = (cp << 6) | (s[i + j] & 0x3f)
        if (k == 2 and (cp < 0x800 or (cp >= 0xd800 and cp <= 0xdfff))) or (k == 3 and (cp < 0x10000 or cp > 0x10ffff)):
            return 0
        i += k + 1
    return 1

# ------------------------------------------------------------------ names -> ids

cdef inline uint64_t hash_bytes(const uint8_t* s, int n) noexcept nogil:
    cdef uint64_t h = 0x9E3779B97F4A7C15ULL ^ <uint64_t>n
    cdef uint64_t w
    while n >= 8:
        memcpy(&w, s, 8)
        h = (h ^ w) * 0xbf58476d1ce4e5b9ULL
        h ^= h >> 29
        s += 8
        n -= 8
    if n > 0:
        w = 0
        memcpy(&w, s, n)
        h = (h ^ w) * 0xbf58476d1ce4e5b9ULL
    h ^= h >> 32
    h *= 0x94d049bb133111ebULL
    h ^= h >> 29
    return h

cdef int grow_tens(Ctx* c) except -1:
    cdef int ncap = c.tcap * 2
    cdef Tens* t = <Tens*>realloc(c.T, ncap * sizeof(Tens))
    if t == NULL:
        raise MemoryError()
    c.T = t
    c.tcap = ncap
    cdef int hsize = ncap * 2
    cdef int i, j
    free(c.hslot)
    c.hslot = <int*>malloc(hsize * sizeof(int))
    if c.hslot == NULL:
        raise MemoryError()
    memset(c.hslot, 0xff, hsize * sizeof(int))
    c.hmask = hsize - 1
    for i in range(c.nt):
        j = <int>(c.T[i].hash & c.hmask)
        while c.hslot[j] >= 0:
            j = (j + 1) & c.hmask
        c.hslot[j] = i
    return 0

cdef int intern(Ctx* c, const uint8_t* s, int n) except -2:
    """The id of tensor name s[:n]; -1 for the empty name (an omitted optional input)."""
    if n == 0:
        return -1
    cdef uint64_t h = hash_bytes(s, n)
    cdef int i = <int>(h & c.hmask)
    cdef int t
    cdef Tens* e
    while True:
        t = c.hslot[i]
        if t < 0:
            break
        e = &c.T[t]
        if e.hash == h and e.nlen == n and memcmp(e.name, s, n) == 0:
            return t
        i = (i + 1) & c.hmask
    if not utf8_ok(s, n):
        raise GiveUp("name is not UTF-8")
    if c.nt >= c.tcap:
        grow_tens(c)
        i = <int>(h & c.hmask)
        while c.hslot[i] >= 0:
            i = (i + 1) & c.hmask
    t = c.nt
    c.nt += 1
    c.hslot[i] = t
    e = &c.T[t]
    memset(e, 0, sizeof(Tens))
    e.name = s
    e.nlen = n
    e.hash = h
    e.rank = -1
    e.producer = -1
    e.cons1 = -1
    e.cons2 = -1
    e.alias = -1
    return t

cdef inline int intern_field(Ctx* c, Rd* r, int wt) except -2:
    cdef Rd s
    if not sub(r, &s, wt):
        raise GiveUp("wire")
    return intern(c, s.p, <int>(s.end - s.p))

cdef int push_int(int** arr, int* n, int* cap, int v) except -1:
    cdef int* a
    if n[0] >= cap[0]:
        a = <int*>realloc(arr[0], cap[0] * 2 * sizeof(int))
        if a == NULL:
            raise MemoryError()
        arr[0] = a
        cap[0] *= 2
    arr[0][n[0]] = v
    n[0] += 1
    return 0

# ------------------------------------------------------------------ messages

cdef inline bint eq(const uint8_t* p, int n, const char* lit, int ln) noexcept nogil:
    return n == ln and memcmp(p, lit, n) == 0

cdef int op_code(const uint8_t* p, int n) noexcept nogil:
    cdef int i
    if n == 0:
        return OP_OTHER
    if eq(p, n, b"Conv", 4): return OP_CONV
    if eq(p, n, b"Constant", 8): return OP_CONSTANT
    if eq(p, n, b"Clip", 4): return OP_CLIP
    if eq(p, n, b"Relu", 4): return OP_RELU
    if eq(p, n, b"Add", 3): return OP_ADD
    if eq(p, n, b"Mul", 3): return OP_MUL
    if eq(p, n, b"Sigmoid", 7): return OP_SIGMOID
    if eq(p, n, b"HardSigmoid", 11): return OP_HARDSIGMOID
    if eq(p, n, b"HardSwish", 9): return OP_HARDSWISH
    if eq(p, n, b"Tanh", 4): return OP_TANH
    if eq(p, n, b"LeakyRelu", 9): return OP_LEAKYRELU
    if eq(p, n, b"Sub", 3): return OP_SUB
    if eq(p, n, b"Div", 3): return OP_DIV
    if eq(p, n, b"GlobalAveragePool", 17): return OP_GAP
    if eq(p, n, b"GlobalMaxPool", 13): return OP_GMP
    if eq(p, n, b"ReduceMean", 10): return OP_REDUCEMEAN
    if eq(p, n, b"ReduceMax", 9): return OP_REDUCEMAX
    if eq(p, n, b"Flatten", 7): return OP_FLATTEN
    if eq(p, n, b"Reshape", 7): return OP_RESHAPE
    if eq(p, n, b"Gemm", 4): return OP_GEMM
    if eq(p, n, b"MaxPool", 7): return OP_MAXPOOL
    if eq(p, n, b"AveragePool", 11): return OP_AVGPOOL
    if eq(p, n, b"Concat", 6): return OP_CONCAT
    if eq(p, n, b"Identity", 8): return OP_IDENTITY
    if eq(p, n, b"Dropout", 7): return OP_DROPOUT
    return OP_OTHER

cdef int allowed_attrs(int op) noexcept nogil:
    if op == OP_CONV:
        return A_GROUP | A_STRIDES | A_DILATIONS | A_PADS | A_KSHAPE | A_AUTOPAD
    if op == OP_MAXPOOL:
        return A_STRIDES | A_PADS | A_KSHAPE | A_AUTOPAD | A_CEIL | A_STORAGE | A_DILATIONS
    if op == OP_AVGPOOL:
        return A_STRIDES | A_PADS | A_KSHAPE | A_AUTOPAD | A_CEIL | A_COUNTPAD | A_DILATIONS
    if op == OP_CLIP:
        return A_MIN | A_MAX
    if op == OP_HARDSIGMOID:
        return A_ALPHA | A_BETA
    if op == OP_LEAKYRELU:
        return A_ALPHA
    if op == OP_GEMM:
        return A_ALPHA | A_BETA | A_TRANSA | A_TRANSB
    if op == OP_REDUCEMEAN or op == OP_REDUCEMAX:
        return A_AXES | A_KEEPDIMS
    if op == OP_FLATTEN or op == OP_CONCAT:
        return A_AXIS
    if op == OP_RESHAPE:
        return A_ALLOWZERO
    if op == OP_CONSTANT:
        return A_VALUE
    if op == OP_DROPOUT:
        return A_RATIO | A_SEED
    return 0

cdef int parse_tensor(Rd* r, TInfo* ti) except -1:
    """TensorProto: name, dims, data type, whether it carries data, and (small) its values."""
    cdef const uint8_t* start = r.p
    cdef uint64_t key
    cdef int f, wt, i, ext = 0
    cdef Rd s, raw
    cdef int has_raw = 0, nf = 0, n32 = 0, n64 = 0, nd64 = 0, nu64 = 0, nstr = 0
    cdef int64_t nel
    cdef int64_t tmp[MAXR]
    cdef int ntmp
    cdef float ff[MAXR]
    cdef double dd[MAXR]
    cdef int64_t i64[MAXR]
    cdef int64_t i32[MAXR]
    cdef Rd fs
    memset(ti, 0, sizeof(TInfo))
    raw.p = NULL
    raw.end = NULL
    while r.p < r.end:
        key = varint(r)
        f = <int>(key >> 3)
        wt = <int>(key & 7)
        if r.err:
            break
        if f == 1:
            if rd_ints(r, wt, ti.dims, &ti.rank, MAXR) < 0:
                raise GiveUp("tensor rank")
        elif f == 2 and wt == 0:
            ti.dtype = <int>varint(r)
        elif f == 8:
            if not sub(r, &s, wt):
                break
            ti.name = s.p
            ti.nlen = <int>(s.end - s.p)
        elif f == 9:
            if not sub(r, &raw, wt):
                break
            has_raw = raw.end > raw.p
        elif f == 4:  # float_data
            if wt == 5:
                if nf < MAXR:
                    ff[nf] = rd_f32(r)
                else:
                    skip(r, wt)
                nf += 1
            elif wt == 2:
                if not sub(r, &fs, wt):
                    break
                if (fs.end - fs.p) % 4:
                    raise GiveUp("float_data")
                while fs.p < fs.end:
                    if nf < MAXR:
                        ff[nf] = rd_f32(&fs)
                    else:
                        fs.p += 4
                    nf += 1
            else:
                raise GiveUp("float_data")
        elif f == 7 or f == 5:  # int64_data, int32_data (varints)
            ntmp = 0
            if wt == 0:
                tmp[0] = <int64_t>varint(r)
                ntmp = 1
                if f == 7:
                    if n64 < MAXR: i64[n64] = tmp[0]
                    n64 += 1
                else:
                    if n32 < MAXR: i32[n32] = tmp[0]
                    n32 += 1
            elif wt == 2:
                if not sub(r, &fs, wt):
                    break
                while fs.p < fs.end:
                    tmp[0] = <int64_t>varint(&fs)
                    if f == 7:
                        if n64 < MAXR: i64[n64] = tmp[0]
                        n64 += 1
                    else:
                        if n32 < MAXR: i32[n32] = tmp[0]
                        n32 += 1
                if fs.err:
                    raise GiveUp("int data")
            else:
                raise GiveUp("int data")
        elif f == 10:  # double_data
            if wt == 1:
                if nd64 < MAXR:
                    dd[nd64] = rd_f64(r)
                else:
                    skip(r, wt)
                nd64 += 1
            elif wt == 2:
                if not sub(r, &fs, wt):
                    break
                if (fs.end - fs.p) % 8:
                    raise GiveUp("double_data")
                while fs.p < fs.end:
                    if nd64 < MAXR:
                        dd[nd64] = rd_f64(&fs)
                    else:
                        fs.p += 8
                    nd64 += 1
            else:
                raise GiveUp("double_data")
        elif f == 11:  # uint64_data
            if count_packed(r, wt, 0, &nu64) < 0:
                raise GiveUp("uint64_data")
        elif f == 6:  # string_data
            skip(r, wt)
            nstr += 1
        elif f == 14 and wt == 0:
            ext = <int>varint(r)
        elif f == 3 or f == 13:  # segment, external_data
            raise GiveUp("tensor segment / external data")
        else:
            skip(r, wt)
    if r.err:
        raise GiveUp("wire (tensor)")
    if ext != 0:
        raise GiveUp("external data")
    nel = 1
    for i in range(ti.rank):
        if ti.dims[i] < 0 or ti.dims[i] > MAX_DIM:
            raise GiveUp("negative or huge dim")
        nel *= ti.dims[i]
        if nel > (<int64_t>1 << 40):
            raise GiveUp("huge tensor")
    check_size(ti.rank, ti.dims)
    ti.dataless = 0 if nel == 0 else not (has_raw or nf or n32 or n64 or nd64 or nu64 or nstr)
    ti.vstate = 0
    if ti.dataless:
        return 0
    ti.vstate = 2
    if nel == 0 or nel > MAXR or r.end - start > MAX_INIT_VALUE_BYTES:
        return 0
    ti.nval = <int>nel
    if has_raw:
        if nf or n32 or n64 or nd64 or nu64 or nstr:
            return 0
        if ti.dtype == 1 and raw.end - raw.p == 4 * nel:
            for i in range(nel):
                ti.vals[i] = rd_f32(&raw)
        elif ti.dtype == 11 and raw.end - raw.p == 8 * nel:
            for i in range(nel):
                ti.vals[i] = rd_f64(&raw)
        elif ti.dtype == 7 and raw.end - raw.p == 8 * nel:
            ti.is_int = 1
            for i in range(nel):
                memcpy(&ti.ivals[i], raw.p + 8 * i, 8)
        else:
            return 0
    elif ti.dtype == 1 and nf == nel and not (n32 or n64 or nd64 or nu64 or nstr):
        for i in range(nel):
            ti.vals[i] = ff[i]
    elif ti.dtype == 11 and nd64 == nel and not (nf or n32 or n64 or nu64 or nstr):
        for i in range(nel):
            ti.vals[i] = dd[i]
    elif ti.dtype == 7 and n64 == nel and not (nf or n32 or nd64 or nu64 or nstr):
        ti.is_int = 1
        for i in range(nel):
            ti.ivals[i] = i64[i]
    else:
        return 0
    ti.vstate = 1
    return 0

cdef int parse_attr(Ctx* c, Node* nd, Rd* r) except -1:
    cdef uint64_t key
    cdef int f, wt, nints = 0, atype = 0, has_t = 0, bit = 0
    cdef const uint8_t* name = NULL
    cdef int nlen = 0
    cdef int64_t ival = 0
    cdef double fval = 0
    cdef int64_t ints[2 * MAXR]
    cdef Rd s, sv, tv
    sv.p = NULL
    sv.end = NULL
    tv.p = NULL
    tv.end = NULL
    while r.p < r.end:
        key = varint(r)
        f = <int>(key >> 3)
        wt = <int>(key & 7)
        if r.err:
            break
        if f == 1:
            if not sub(r, &s, wt):
                break
            name = s.p
            nlen = <int>(s.end - s.p)
        elif f == 3 and wt == 0:
            ival = <int64_t>varint(r)
        elif f == 2 and wt == 5:
            fval = rd_f32(r)
        elif f == 8:
            if rd_ints(r, wt, ints, &nints, 2 * MAXR) < 0:
                raise GiveUp("ints attribute")
        elif f == 4:
            if not sub(r, &sv, wt):
                break
        elif f == 5:
            if has_t:
                raise GiveUp("two tensors")
            if not sub(r, &tv, wt):
                break
            has_t = 1
        elif f == 20 and wt == 0:
            atype = <int>varint(r)
        elif f == 13:  # doc_string
            skip(r, wt)
        else:
            raise GiveUp("attribute field")
    if r.err:
        raise GiveUp("wire (attribute)")
    if eq(name, nlen, b"group", 5):
        bit, nd.group = A_GROUP, ival
        if atype != AT_INT: raise GiveUp("attr type")
    elif eq(name, nlen, b"strides", 7):
        bit = A_STRIDES
        if atype != AT_INTS or nints > MAXR: raise GiveUp("attr type")
        nd.ns = nints
        memcpy(nd.s, ints, nints * sizeof(int64_t))
    elif eq(name, nlen, b"dilations", 9):
        bit = A_DILATIONS
        if atype != AT_INTS or nints > MAXR: raise GiveUp("attr type")
        nd.ndl = nints
        memcpy(nd.dl, ints, nints * sizeof(int64_t))
    elif eq(name, nlen, b"pads", 4):
        bit = A_PADS
        if atype != AT_INTS: raise GiveUp("attr type")
        nd.npads = nints
        memcpy(nd.pads, ints, nints * sizeof(int64_t))
    elif eq(name, nlen, b"kernel_shape", 12):
        bit = A_KSHAPE
        if atype != AT_INTS or nints > MAXR: raise GiveUp("attr type")
        nd.nk = nints
        memcpy(nd.k, ints, nints * sizeof(int64_t))
    elif eq(name, nlen, b"axes", 4):
        bit = A_AXES
        if atype != AT_INTS or nints > MAXR: raise GiveUp("attr type")
        nd.naxes = nints
        memcpy(nd.axes, ints, nints * sizeof(int64_t))
    elif eq(name, nlen, b"auto_pad", 8):
        bit = A_AUTOPAD
        if atype != AT_STRING: raise GiveUp("attr type")
        if sv.p == NULL or eq(sv.p, <int>(sv.end - sv.p), b"NOTSET", 6):
            nd.auto_pad = AP_NOTSET
        elif eq(sv.p, <int>(sv.end - sv.p), b"SAME_UPPER", 10):
            nd.auto_pad = AP_SAME_UPPER
        elif eq(sv.p, <int>(sv.end - sv.p), b"SAME_LOWER", 10):
            nd.auto_pad = AP_SAME_LOWER
        elif eq(sv.p, <int>(sv.end - sv.p), b"VALID", 5):
            nd.auto_pad = AP_VALID
        else:
            raise GiveUp("auto_pad")
    elif eq(name, nlen, b"axis", 4):
        bit, nd.axis = A_AXIS, ival
        if atype != AT_INT: raise GiveUp("attr type")
    elif eq(name, nlen, b"transA", 6):
        bit, nd.transA = A_TRANSA, ival
        if atype != AT_INT: raise GiveUp("attr type")
    elif eq(name, nlen, b"transB", 6):
        bit, nd.transB = A_TRANSB, ival
        if atype != AT_INT: raise GiveUp("attr type")
    elif eq(name, nlen, b"keepdims", 8):
        bit, nd.keepdims = A_KEEPDIMS, ival
        if atype != AT_INT: raise GiveUp("attr type")
    elif eq(name, nlen, b"allowzero", 9):
        bit, nd.allowzero = A_ALLOWZERO, ival
        if atype != AT_INT: raise GiveUp("attr type")
    elif eq(name, nlen, b"ceil_mode", 9):
        bit, nd.ceil_mode = A_CEIL, ival
        if atype != AT_INT: raise GiveUp("attr type")
    elif eq(name, nlen, b"count_include_pad", 17):
        bit = A_COUNTPAD
        if atype != AT_INT: raise GiveUp("attr type")
    elif eq(name, nlen, b"storage_order", 13):
        bit = A_STORAGE
        if atype != AT_INT: raise GiveUp("attr type")
    elif eq(name, nlen, b"seed", 4):
        bit = A_SEED
        if atype != AT_INT: raise GiveUp("attr type")
    elif eq(name, nlen, b"min", 3):
        bit, nd.amin = A_MIN, fval
        if atype != AT_FLOAT: raise GiveUp("attr type")
    elif eq(name, nlen, b"max", 3):
        bit, nd.amax = A_MAX, fval
        if atype != AT_FLOAT: raise GiveUp("attr type")
    elif eq(name, nlen, b"alpha", 5):
        bit, nd.alpha = A_ALPHA, fval
        if atype != AT_FLOAT: raise GiveUp("attr type")
    elif eq(name, nlen, b"beta", 4):
        bit, nd.beta = A_BETA, fval
        if atype != AT_FLOAT: raise GiveUp("attr type")
    elif eq(name, nlen, b"ratio", 5):
        bit = A_RATIO
        if atype != AT_FLOAT: raise GiveUp("attr type")
    elif eq(name, nlen, b"value", 5):
        bit = A_VALUE
        if atype != AT_TENSOR or not has_t: raise GiveUp("attr type")
        parse_tensor(&tv, &nd.cval)
    else:
        raise GiveUp("attribute")
    if nd.attrs & bit:
        raise GiveUp("duplicate attribute")
    nd.attrs |= bit
    return 0

cdef int parse_node(Ctx* c, Rd* r) except -1:
    cdef Node* nd
    cdef uint64_t key
    cdef int f, wt
    cdef Rd s
    if c.nn >= c.ncap:
        nd = <Node*>realloc(c.N, c.ncap * 2 * sizeof(Node))
        if nd == NULL:
            raise MemoryError()
        c.N = nd
        c.ncap *= 2
    nd = &c.N[c.nn]
    memset(nd, 0, sizeof(Node))
    nd.group = 1
    nd.keepdims = 1
    nd.alpha = 0.2
    nd.beta = 0.5
    nd.in0 = c.nins
    nd.out0 = c.nouts
    while r.p < r.end:
        key = varint(r)
        f = <int>(key >> 3)
        wt = <int>(key & 7)
        if r.err:
            break
        if f == 1:
            push_int(&c.ins, &c.nins, &c.icap, intern_field(c, r, wt))
        elif f == 2:
            push_int(&c.outs, &c.nouts, &c.ocap, intern_field(c, r, wt))
        elif f == 3:
            if not sub(r, &s, wt):
                break
            nd.name = s.p
            nd.nlen = <int>(s.end - s.p)
        elif f == 4:
            if not sub(r, &s, wt):
                break
            nd.op = op_code(s.p, <int>(s.end - s.p))
            nd.has_op = 1
            if nd.op == OP_OTHER:
                raise GiveUp("operator outside the native subset")
        elif f == 5:
            if not sub(r, &s, wt):
                break
            parse_attr(c, nd, &s)
        elif f == 7:
            if not sub(r, &s, wt):
                break
            if not (s.end == s.p or eq(s.p, <int>(s.end - s.p), b"ai.onnx", 7)):
                raise GiveUp("non-default domain")
        elif f == 6 or f == 8:  # doc_string, overload
            if f == 8:
                raise GiveUp("overload")
            skip(r, wt)
        else:
            raise GiveUp("node field")
    if r.err:
        raise GiveUp("wire (node)")
    if not nd.has_op:
        raise GiveUp("node without op_type")
    if nd.attrs & ~allowed_attrs(nd.op):
        raise GiveUp("attribute outside the native subset")
    if nd.nlen == 0 or not utf8_ok(nd.name, nd.nlen):
        raise GiveUp("unnamed node")
    nd.nin = c.nins - nd.in0
    nd.nout = c.nouts - nd.out0
    if nd.nout < 1 or c.outs[nd.out0] < 0:
        raise GiveUp("node without a first output")
    c.nn += 1
    return 0

cdef int parse_type(Rd* tp, int64_t* decl) except -1:
    """TypeProto -> decl[0] = rank (-1: no tensor shape), decl[1:] = dims (0: unknown)."""
    cdef uint64_t key
    cdef int rank = 0, has_shape = 0, has_dv, f, wt
    cdef int64_t dv
    cdef Rd tt, sh, dm
    decl[0] = -1
    while tp.p < tp.end:
        key = varint(tp)
        f = <int>(key >> 3)
        wt = <int>(key & 7)
        if tp.err:
            break
        if f == 1:
            if has_shape >= 0 and decl[0] != -1:
                raise GiveUp("two tensor types")
            if not sub(tp, &tt, wt):
                break
            while tt.p < tt.end:
                key = varint(&tt)
                f = <int>(key >> 3)
                wt = <int>(key & 7)
                if tt.err:
                    break
                if f == 2:
                    if has_shape:
                        raise GiveUp("two shapes")
                    has_shape = 1
                    if not sub(&tt, &sh, wt):
                        break
                    while sh.p < sh.end:
                        key = varint(&sh)
                        f = <int>(key >> 3)
                        wt = <int>(key & 7)
                        if sh.err:
                            break
                        if f == 1:
                            if not sub(&sh, &dm, wt):
                                break
                            has_dv = 0
                            dv = 0
                            while dm.p < dm.end:
                                key = varint(&dm)
                                if dm.err:
                                    break
                                if key == (1 << 3):
                                    dv = <int64_t>varint(&dm)
                                    has_dv = 1
                                elif (key >> 3) == 2:
                                    has_dv = 0  # (oneof: dim_param clears dim_value)
                                    dv = 0
                                    skip(&dm, <int>(key & 7))
                                elif (key >> 3) == 3:
                                    skip(&dm, <int>(key & 7))
                                else:
                                    raise GiveUp("dimension field")
                            if dm.err:
                                raise GiveUp("wire (dim)")
                            if rank >= MAXR:
                                raise GiveUp("rank")
                            decl[1 + rank] = dv if has_dv and dv > 0 else 0
                            rank += 1
                        else:
                            raise GiveUp("shape field")
                    if sh.err:
                        raise GiveUp("wire (shape)")
                elif f == 1 and wt == 0:
                    varint(&tt)
                else:
                    raise GiveUp("tensor type field")
            if tt.err:
                raise GiveUp("wire (tensor type)")
            decl[0] = rank if has_shape else -2  # -2: a tensor type without a shape
        elif f == 6:  # denotation
            skip(tp, wt)
        else:
            raise GiveUp("not a tensor type")
    if tp.err:
        raise GiveUp("wire (type)")
    return 0

cdef int parse_value_info(Ctx* c, Rd* r, int kind) except -1:
    """ValueInfoProto of a graph input (kind 0), output (1) or value_info (2)."""
    cdef uint64_t key
    cdef int f, wt, t = -1, ntype = 0, i
    cdef Rd tp
    cdef int64_t decl[1 + MAXR]
    cdef int64_t* dst
    tp.p = NULL
    tp.end = NULL
    while r.p < r.end:
        key = varint(r)
        f = <int>(key >> 3)
        wt = <int>(key & 7)
        if r.err:
            break
        if f == 1:
            t = intern_field(c, r, wt)
        elif f == 2:
            ntype += 1
            if not sub(r, &tp, wt):
                break
        elif f == 3:  # doc_string
            skip(r, wt)
        else:
            raise GiveUp("value info field")
    if r.err or t < 0 or ntype > 1:
        raise GiveUp("value info")
    if ntype:
        parse_type(&tp, decl)
    else:
        decl[0] = -1
    if kind == 0:
        push_int(&c.gin, &c.ngin, &c.gincap, t)
        if decl[0] < 0:
            raise GiveUp("graph input without a tensor shape")
        for i in range(decl[0]):
            if decl[1 + i] <= 0:
                raise GiveUp("dynamic input")
        if c.T[t].rank >= 0 or c.T[t].is_input:
            raise GiveUp("input defined twice")
        c.T[t].rank = <int>decl[0]
        memcpy(c.T[t].dims, &decl[1], decl[0] * sizeof(int64_t))
        c.T[t].is_input = 1
        return 0
    if kind == 1:
        push_int(&c.gout, &c.ngout, &c.goutcap, t)
    else:
        push_int(&c.vinfo, &c.nvinfo, &c.vinfocap, t)
    if c.ndecl >= c.declcap:
        dst = <int64_t*>realloc(c.decl, c.declcap * 2 * (1 + MAXR) * sizeof(int64_t))
        if dst == NULL:
            raise MemoryError()
        c.decl = dst
        c.declcap *= 2
    memcpy(&c.decl[c.ndecl * (1 + MAXR)], decl, (1 + MAXR) * sizeof(int64_t))
    c.ndecl += 1
    return 0

cdef int parse_initializer(Ctx* c, Rd* r) except -1:
    cdef TInfo ti
    cdef int t
    cdef Tens* e
    parse_tensor(r, &ti)
    if ti.nlen == 0:
        raise GiveUp("initializer without a name")
    t = intern(c, ti.name, ti.nlen)
    e = &c.T[t]
    if e.is_init:
        raise GiveUp("initializer defined twice")
    e.is_init = 1
    e.is_static = 1
    e.defined = 1
    e.const_src = 1
    e.rank = ti.rank
    memcpy(e.dims, ti.dims, ti.rank * sizeof(int64_t))
    e.vstate = ti.vstate
    e.nval = ti.nval
    e.is_int = ti.is_int
    memcpy(e.vals, ti.vals, sizeof(ti.vals))
    memcpy(e.ivals, ti.ivals, sizeof(ti.ivals))
    if ti.dataless:
        if c.ndataless == 0:
            c.first_dataless = ti.name
            c.first_dataless_len = ti.nlen
        c.ndataless += 1
    return 0

cdef int parse_graph(Ctx* c) except -1:
    cdef Rd r, s
    cdef uint64_t key
    cdef int f, wt, nname = 0
    r.p = c.gp
    r.end = c.gend
    r.err = 0
    while r.p < r.end:
        key = varint(&r)
        f = <int>(key >> 3)
        wt = <int>(key & 7)
        if r.err:
            break
        if f == 1 or f == 5 or f == 11 or f == 12 or f == 13:
            if not sub(&r, &s, wt):
                break
            if f == 1:
                parse_node(c, &s)
            elif f == 5:
                parse_initializer(c, &s)
            elif f == 11:
                parse_value_info(c, &s, 0)
            elif f == 12:
                parse_value_info(c, &s, 1)
            else:
                parse_value_info(c, &s, 2)
        elif f == 2:
            if not sub(&r, &s, wt):
                break
            c.gname = s.p
            c.gnlen = <int>(s.end - s.p)
            if not utf8_ok(c.gname, c.gnlen):
                raise GiveUp("graph name")
        elif f == 10 or f == 14 or f == 16:  # doc_string, quantization_annotation, metadata_props
            skip(&r, wt)
        else:  # sparse_initializer (15) and anything else
            raise GiveUp("graph field")
    if r.err:
        raise GiveUp("wire (graph)")
    return 0

cdef int parse_model(Ctx* c, const uint8_t* buf, Py_ssize_t n) except -1:
    cdef Rd r, s, o
    cdef uint64_t key
    cdef int f, wt, dom_ok
    cdef int64_t ver
    r.p = buf
    r.end = buf + n
    r.err = 0
    while r.p < r.end:
        key = varint(&r)
        f = <int>(key >> 3)
        wt = <int>(key & 7)
        if r.err:
            break
        if f == 1 and wt == 0:
            c.ir_version = <int64_t>varint(&r)
        elif f == 7:
            if c.has_graph:
                raise GiveUp("two graphs (merged by protobuf)")
            if not sub(&r, &s, wt):
                break
            c.gp = s.p
            c.gend = s.end
            c.has_graph = 1
        elif f == 8:
            if not sub(&r, &o, wt):
                break
            dom_ok = 1
            ver = 0
            while o.p < o.end:
                key = varint(&o)
                if o.err:
                    break
                if (key >> 3) == 1:
                    if not sub(&o, &s, <int>(key & 7)):
                        break
                    dom_ok = s.p == s.end or eq(s.p, <int>(s.end - s.p), b"ai.onnx", 7)
                elif key == (2 << 3):
                    ver = <int64_t>varint(&o)
                else:
                    skip(&o, <int>(key & 7))
            if o.err:
                raise GiveUp("wire (opset)")
            c.has_opset = 1
            if dom_ok and c.opset == 0:
                c.opset = ver if ver != 0 else -1
        elif f in (2, 3, 4, 5, 6, 14, 20, 25):
            skip(&r, wt)
        else:
            raise GiveUp("model field")
    if r.err:
        raise GiveUp("wire (model)")
    if c.ir_version <= 0 or not c.has_graph or not c.has_opset or c.opset <= 0:
        raise GiveUp("not a model the native core handles")
    parse_graph(c)
    if c.nn == 0:
        raise GiveUp("no nodes")
    return 0

# ------------------------------------------------------------------ context

cdef int ctx_init(Ctx* c, Py_ssize_t n) except -1:
    memset(c, 0, sizeof(Ctx))
    c.tcap = 256
    while c.tcap < n // 100 and c.tcap < (1 << 20):
        c.tcap *= 2
    c.T = <Tens*>malloc(c.tcap * sizeof(Tens))
    c.hmask = c.tcap * 2 - 1
    c.hslot = <int*>malloc((c.hmask + 1) * sizeof(int))
    c.ncap = c.tcap // 2
    c.N = <Node*>malloc(c.ncap * sizeof(Node))
    c.icap = c.tcap * 2
    c.ins = <int*>malloc(c.icap * sizeof(int))
    c.ocap = c.tcap
    c.outs = <int*>malloc(c.ocap * sizeof(int))
    c.gincap = 16
    c.gin = <int*>malloc(c.gincap * sizeof(int))
    c.goutcap = 16
    c.gout = <int*>malloc(c.goutcap * sizeof(int))
    c.vinfocap = 16
    c.vinfo = <int*>malloc(c.vinfocap * sizeof(int))
    c.declcap = 16
    c.decl = <int64_t*>malloc(c.declcap * (1 + MAXR) * sizeof(int64_t))
    if not (c.T and c.hslot and c.N and c.ins and c.outs and c.gin and c.gout and c.vinfo and c.decl):
        raise MemoryError()
    memset(c.hslot, 0xff, (c.hmask + 1) * sizeof(int))
    return 0

cdef void ctx_free(Ctx* c) noexcept:
    free(c.T)
    free(c.hslot)
    free(c.N)
    free(c.ins)
    free(c.outs)
    free(c.gin)
    free(c.gout)
    free(c.vinfo)
    free(c.decl)

# ------------------------------------------------------------------ checks, shapes

cdef inline int canon(Ctx* c, int t) noexcept nogil:
    while t >= 0 and c.T[t].alias >= 0:
        t = c.T[t].alias
    return t

cdef inline Tens* shp(Ctx* c, int t) except NULL:
    """A tensor's shape (every tensor read has one once propagation ran)."""
    if t < 0 or c.T[t].rank < 0:
        raise GiveUp("unknown shape")
    return &c.T[t]

cdef inline int64_t nelem(Tens* e) noexcept nogil:
    cdef int64_t p = 1
    cdef int i
    for i in range(e.rank):
        p *= e.dims[i]
    return p

cdef enum:
    MAX_DIM = 1 << 30

cdef int check_size(int rank, int64_t* dims) except -1:
    """Give up on dims over 2**30 or more than 2**40 elements (no int64 overflow below)."""
    cdef int64_t p = 1
    cdef int i
    for i in range(rank):
        if dims[i] < 0 or dims[i] > MAX_DIM:
            raise GiveUp("dimension too large")
        if dims[i] and p > ((<int64_t>1) << 40) // dims[i]:
            raise GiveUp("tensor too large")
        p *= dims[i]
    return 0

cdef int validate(Ctx* c) except -1:
    """The importer's checks (_validate, _fix_inputs, _topo_sort's order) where they pass;
    anything else (which the Python path reports or handles) gives up."""
    cdef int i, j, t
    cdef Node* nd
    for i in range(c.ngin):
        t = c.gin[i]
        if c.T[t].is_init:
            c.T[t].is_input = 0
            raise GiveUp("graph input that is an initializer")
        c.T[t].defined = 1
        check_size(c.T[t].rank, c.T[t].dims)
        if c.T[t].rank >= 2 and c.T[t].dims[0] > 1:
            raise GiveUp("batch > 1")
    if c.ngin == 0:
        raise GiveUp("no graph inputs")
    for i in range(c.nn):
        nd = &c.N[i]
        for j in range(nd.nout):
            t = c.outs[nd.out0 + j]
            if t >= 0:
                if c.T[t].producer >= 0 or c.T[t].is_init or c.T[t].is_input:
                    raise GiveUp("a tensor with two producers")
                c.T[t].producer = i
                c.T[t].defined = 1
    for i in range(c.nn):
        nd = &c.N[i]
        for j in range(nd.nin):
            t = c.ins[nd.in0 + j]
            if t >= 0:
                if not c.T[t].defined:
                    raise GiveUp("undefined input")
                if c.T[t].producer >= i:
                    raise GiveUp("not in topological order")
    for i in range(c.ngout):
        if not c.T[c.gout[i]].defined:
            raise GiveUp("graph output not produced")
    return 0

cdef inline int64_t fdiv(int64_t a, int64_t b) noexcept nogil:
    cdef int64_t q = a // b
    if (a % b != 0) and ((a < 0) != (b < 0)):
        q -= 1
    return q

cdef int window_out(Node* nd, Tens* x, int64_t* kern, int64_t* out) except -1:
    """onnx_shapes._window for a 2-D window (ceil_mode 0): the output H, W."""
    cdef int i
    cdef int64_t st, dl, k_eff, size, eff, residual, total
    if (nd.ns and nd.ns != 2) or (nd.ndl and nd.ndl != 2) or (nd.npads and nd.npads != 4):
        raise GiveUp("window attributes")
    for i in range(2):
        if (nd.ns and nd.s[i] > MAX_DIM) or (nd.ndl and nd.dl[i] > MAX_DIM) or kern[i] > MAX_DIM or kern[i] < -MAX_DIM:
            raise GiveUp("window too large")
    for i in range(4):
        if nd.npads and nd.pads[i] > MAX_DIM:
            raise GiveUp("pads too large")
    for i in range(2):
        if nd.ns and nd.s[i] < 1:
            raise GiveUp("stride")
        if nd.ndl and nd.dl[i] < 1:
            raise GiveUp("dilation")
    for i in range(4):
        if nd.npads and nd.pads[i] < 0:
            raise GiveUp("pads")
    for i in range(2):
        st = nd.s[i] if nd.ns else 1
        dl = nd.dl[i] if nd.ndl else 1
        k_eff = (kern[i] - 1) * dl + 1
        size = x.dims[2 + i]
        if nd.auto_pad == AP_NOTSET:
            eff = size + (nd.pads[i] + nd.pads[i + 2] if nd.npads else 0)
        elif nd.auto_pad == AP_VALID:
            eff = size
        else:
            residual = size % st
            total = k_eff - st if residual == 0 else k_eff - residual
            eff = size + (total if total > 0 else 0)
        if eff < k_eff:
            raise GiveUp("window does not fit")
        out[i] = (eff - k_eff) // st + 1
    return 0

cdef int set_value(Tens* y, TInfo* ti) noexcept nogil:
    y.vstate = ti.vstate
    y.nval = ti.nval
    y.is_int = ti.is_int
    memcpy(y.vals, ti.vals, sizeof(ti.vals))
    memcpy(y.ivals, ti.ivals, sizeof(ti.ivals))
    return 0

cdef int const_ints(Ctx* c, int t, int64_t* out, int* n) except -1:
    """The int64 values of an initializer or Constant output (no canon: as onnx_shapes)."""
    cdef Tens* e
    if t < 0:
        raise GiveUp("no value")
    e = &c.T[t]
    if not e.const_src or e.vstate != 1 or not e.is_int:
        raise GiveUp("value unknown to the native core")
    n[0] = e.nval
    memcpy(out, e.ivals, e.nval * sizeof(int64_t))
    return 0

cdef int propagate(Ctx* c) except -1:
    """onnx_shapes.propagate_shapes for the subset: every output's shape (or give up)."""
    cdef int i, j, r, nz, neg
    cdef Node* nd
    cdef Tens* x
    cdef Tens* w
    cdef Tens* y
    cdef Tens* b
    cdef int64_t hw[2]
    cdef int64_t da, db, ax, p, q, total, rest
    cdef int64_t tgt[MAXR]
    cdef int ntgt
    cdef uint8_t red[MAXR]
    cdef int op
    for i in range(c.nn):
        nd = &c.N[i]
        for j in range(nd.nin):
            if c.ins[nd.in0 + j] >= 0 and c.T[c.ins[nd.in0 + j]].rank < 0:
                raise GiveUp("input without a shape")
        op = nd.op
        if nd.nout != 1:
            raise GiveUp("several outputs")
        y = &c.T[c.outs[nd.out0]]
        if op == OP_CONSTANT:
            if nd.attrs != A_VALUE:
                raise GiveUp("constant attributes")
            y.rank = nd.cval.rank
            memcpy(y.dims, nd.cval.dims, nd.cval.rank * sizeof(int64_t))
            if nd.cval.dataless:
                raise GiveUp("dataless Constant")
            set_value(y, &nd.cval)
            y.const_src = 1
            for j in range(y.rank):
                if y.dims[j] < 1:
                    raise GiveUp("zero dim")
            continue
        if nd.nin < 1 or c.ins[nd.in0] < 0:
            raise GiveUp("missing first input")
        x = shp(c, c.ins[nd.in0])
        if op == OP_CONV:
            if nd.nin < 2:
                raise GiveUp("conv weight")
            w = shp(c, c.ins[nd.in0 + 1])
            if x.rank != 4 or w.rank != 4:
                raise GiveUp("conv rank")
            if nd.attrs & A_KSHAPE and (nd.nk != 2 or nd.k[0] != w.dims[2] or nd.k[1] != w.dims[3]):
                raise GiveUp("kernel_shape")
            if nd.group < 1 or x.dims[1] % nd.group or w.dims[0] % nd.group or w.dims[1] * nd.group != x.dims[1]:
                raise GiveUp("groups")
            window_out(nd, x, &w.dims[2], hw)
            y.rank = 4
            y.dims[0] = x.dims[0]
            y.dims[1] = w.dims[0]
            y.dims[2] = hw[0]
            y.dims[3] = hw[1]
        elif op == OP_MAXPOOL or op == OP_AVGPOOL:
            if not (nd.attrs & A_KSHAPE) or nd.nk != 2 or x.rank != 4:
                raise GiveUp("pool kernel")
            if nd.ceil_mode != 0:
                raise GiveUp("ceil_mode")
            if nd.attrs & A_DILATIONS:
                if op == OP_AVGPOOL and c.opset < 19:
                    raise GiveUp("avgpool dilations")
                for j in range(nd.ndl):
                    if nd.dl[j] != 1:
                        raise GiveUp("dilated pool")
            window_out(nd, x, nd.k, hw)
            y.rank = 4
            y.dims[0] = x.dims[0]
            y.dims[1] = x.dims[1]
            y.dims[2] = hw[0]
            y.dims[3] = hw[1]
        elif (op == OP_CLIP or op == OP_RELU or op == OP_SIGMOID or op == OP_HARDSIGMOID or op == OP_HARDSWISH
              or op == OP_TANH or op == OP_LEAKYRELU or op == OP_IDENTITY or op == OP_DROPOUT):
            y.rank = x.rank
            memcpy(y.dims, x.dims, x.rank * sizeof(int64_t))
        elif op == OP_ADD or op == OP_SUB or op == OP_MUL or op == OP_DIV:
            if nd.nin != 2 or c.ins[nd.in0 + 1] < 0:
                raise GiveUp("binary op with other than two inputs")
            b = shp(c, c.ins[nd.in0 + 1])
            r = x.rank if x.rank > b.rank else b.rank
            for j in range(r):
                da = x.dims[x.rank - r + j] if x.rank - r + j >= 0 else 1
                db = b.dims[b.rank - r + j] if b.rank - r + j >= 0 else 1
                if da != db and da != 1 and db != 1:
                    raise GiveUp("incompatible broadcast")
                y.dims[j] = db if da == 1 else da
            y.rank = r
        elif op == OP_GAP or op == OP_GMP:
            if x.rank < 3:
                raise GiveUp("global pool rank")
            y.rank = x.rank
            y.dims[0] = x.dims[0]
            y.dims[1] = x.dims[1]
            for j in range(2, x.rank):
                y.dims[j] = 1
        elif op == OP_REDUCEMEAN or op == OP_REDUCEMAX:
            if c.opset >= 18:
                if nd.attrs & A_AXES or nd.nin < 2 or c.ins[nd.in0 + 1] < 0:
                    raise GiveUp("reduce axes")
                const_ints(c, c.ins[nd.in0 + 1], tgt, &ntgt)
            else:
                if nd.nin > 1 or not (nd.attrs & A_AXES):
                    raise GiveUp("reduce axes")
                ntgt = nd.naxes
                memcpy(tgt, nd.axes, ntgt * sizeof(int64_t))
            if ntgt == 0:
                raise GiveUp("reduce over all axes")
            memset(red, 0, sizeof(red))
            for j in range(ntgt):
                ax = tgt[j]
                if not (-x.rank <= ax < x.rank):
                    raise GiveUp("axis out of range")
                red[ax % x.rank if ax >= 0 else ax + x.rank] = 1
            r = 0
            for j in range(x.rank):
                if red[j]:
                    if nd.keepdims:
                        y.dims[r] = 1
                        r += 1
                else:
                    y.dims[r] = x.dims[j]
                    r += 1
            y.rank = r
        elif op == OP_FLATTEN:
            ax = nd.axis if nd.attrs & A_AXIS else 1
            if not (-x.rank <= ax <= x.rank):
                raise GiveUp("flatten axis")
            if ax < 0:
                ax += x.rank
            p = 1
            q = 1
            for j in range(x.rank):
                if j < ax:
                    p *= x.dims[j]
                else:
                    q *= x.dims[j]
            y.rank = 2
            y.dims[0] = p
            y.dims[1] = q
        elif op == OP_RESHAPE:
            if c.opset < 5 or nd.nin != 2 or c.ins[nd.in0 + 1] < 0:
                raise GiveUp("reshape")
            const_ints(c, c.ins[nd.in0 + 1], tgt, &ntgt)
            neg = -1
            for j in range(ntgt):
                if tgt[j] == 0 and not nd.allowzero:
                    if j >= x.rank:
                        raise GiveUp("reshape copies a missing dim")
                    y.dims[j] = x.dims[j]
                elif tgt[j] == -1:
                    if neg >= 0:
                        raise GiveUp("two -1")
                    neg = j
                    y.dims[j] = 1
                elif tgt[j] < 0 or tgt[j] > MAX_DIM:
                    raise GiveUp("negative or huge reshape dim")
                else:
                    y.dims[j] = tgt[j]
            y.rank = ntgt
            check_size(y.rank, y.dims)
            total = nelem(x)
            if neg >= 0:
                rest = nelem(y)
                if rest == 0 or total % rest:
                    raise GiveUp("reshape -1")
                y.dims[neg] = total // rest
            if nelem(y) != total:
                raise GiveUp("reshape size")
        elif op == OP_GEMM:
            if nd.nin < 2 or c.ins[nd.in0 + 1] < 0:
                raise GiveUp("gemm")
            w = shp(c, c.ins[nd.in0 + 1])
            if x.rank != 2 or w.rank != 2:
                raise GiveUp("gemm rank")
            p = x.dims[0] if nd.transA else x.dims[1]  # k
            q = w.dims[1] if nd.transB else w.dims[0]  # k2
            if p != q:
                raise GiveUp("gemm inner dims")
            y.rank = 2
            y.dims[0] = x.dims[1] if nd.transA else x.dims[0]
            y.dims[1] = w.dims[0] if nd.transB else w.dims[1]
            if nd.nin > 2 and c.ins[nd.in0 + 2] >= 0:
                b = shp(c, c.ins[nd.in0 + 2])
                if b.rank > 2:
                    raise GiveUp("gemm bias rank")
                for j in range(b.rank):
                    db = b.dims[b.rank - 1 - j]
                    da = y.dims[1 - j]
                    if db != da and db != 1 and da != 1:
                        raise GiveUp("gemm bias broadcast")
                    if da == 1 and db != 1:
                        raise GiveUp("gemm bias broadcast")
        elif op == OP_CONCAT:
            if not (nd.attrs & A_AXIS):
                raise GiveUp("concat axis")
            r = x.rank
            if r == 0 or not (-r <= nd.axis < r):
                raise GiveUp("axis out of range")
            ax = nd.axis % r if nd.axis >= 0 else nd.axis + r
            y.rank = r
            memcpy(y.dims, x.dims, r * sizeof(int64_t))
            nz = 0
            y.dims[ax] = 0
            for j in range(nd.nin):
                if c.ins[nd.in0 + j] < 0:
                    continue
                b = shp(c, c.ins[nd.in0 + j])
                if b.rank != r:
                    raise GiveUp("concat dims")
                for q in range(r):
                    if q != ax and b.dims[q] != x.dims[q]:
                        raise GiveUp("concat dims")
                y.dims[ax] += b.dims[ax]
                nz += 1
        else:
            raise GiveUp("op")
        for j in range(y.rank):
            if y.dims[j] < 1:
                raise GiveUp("non-positive dimension")
        check_size(y.rank, y.dims)
    # declared shapes (graph outputs, then value_info) must agree where static
    cdef int64_t* d
    cdef int t
    for i in range(c.ngout + c.nvinfo):
        t = c.gout[i] if i < c.ngout else c.vinfo[i - c.ngout]
        d = &c.decl[i * (1 + MAXR)]
        if c.T[t].rank < 0:
            raise GiveUp("declared tensor not computed")
        if d[0] >= 0:
            if d[0] != c.T[t].rank:
                raise GiveUp("declared shape disagrees")
            for j in range(c.T[t].rank):
                if d[1 + j] != 0 and d[1 + j] != c.T[t].dims[j]:
                    raise GiveUp("declared shape disagrees")
    return 0

# ------------------------------------------------------------------ graph passes

cdef inline bint same_shape(Tens* a, Tens* b) noexcept nogil:
    if a.rank != b.rank:
        return 0
    return memcmp(a.dims, b.dims, a.rank * sizeof(int64_t)) == 0

cdef inline int nonempty_inputs(Ctx* c, Node* nd) noexcept nogil:
    cdef int j, k = 0
    for j in range(nd.nin):
        if c.ins[nd.in0 + j] >= 0:
            k += 1
    return k

cdef int graph_pass(Ctx* c) except -1:
    """_Extractor.__init__: aliases and no-ops, graph outputs, live nodes, consumers, static tensors."""
    cdef int i, j, k, t, u, allst, dup, x0, y0
    cdef Node* nd
    for i in range(c.nn):
        nd = &c.N[i]
        if nd.nin == 0 or c.ins[nd.in0] < 0:
            continue
        x0 = c.ins[nd.in0]
        y0 = c.outs[nd.out0]
        if nd.op == OP_IDENTITY:
            nd.noop = 1
        elif nd.op == OP_DROPOUT:
            nd.noop = 2
        elif nd.op == OP_CONCAT and nonempty_inputs(c, nd) == 1:
            nd.noop = 3
        elif (nd.op == OP_FLATTEN or nd.op == OP_RESHAPE) and same_shape(&c.T[x0], &c.T[y0]):
            nd.noop = 4
        if nd.noop:
            c.T[y0].alias = canon(c, x0)
    for i in range(c.ngout):
        t = c.gout[i]
        c.T[t].needed = 1
        c.T[canon(c, t)].is_gout = 1
    for i in range(c.nn - 1, -1, -1):  # (the order is topological)
        nd = &c.N[i]
        for j in range(nd.nout):
            t = c.outs[nd.out0 + j]
            if t >= 0 and c.T[t].needed:
                nd.live = 1
                break
        if nd.live:
            for j in range(nd.nin):
                t = c.ins[nd.in0 + j]
                if t >= 0:
                    c.T[t].needed = 1
    for i in range(c.nn):
        nd = &c.N[i]
        allst = 1
        k = 0
        for j in range(nd.nin):
            t = c.ins[nd.in0 + j]
            if t < 0:
                continue
            t = canon(c, t)
            k += 1
            if not c.T[t].is_static:
                allst = 0
            if nd.live and not nd.noop:
                dup = 0
                for u in range(j):
                    if c.ins[nd.in0 + u] >= 0 and canon(c, c.ins[nd.in0 + u]) == t:
                        dup = 1
                        break
                if not dup:
                    if c.T[t].ncons == 0:
                        c.T[t].cons1 = i
                    elif c.T[t].ncons == 1:
                        c.T[t].cons2 = i
                    c.T[t].ncons += 1
        if nd.op == OP_CONSTANT:
            c.T[c.outs[nd.out0]].is_static = 1
        elif k and allst:
            raise GiveUp("a node computed from constants only")
    return 0

cdef inline void hwc4(Tens* s, int64_t* o) noexcept nogil:
    """o = n, h, w, c (estimator.layers.hwc)."""
    cdef int i
    cdef int64_t v[MAXR]
    for i in range(s.rank):
        v[i] = s.dims[i] if s.dims[i] > 1 else 1
    if s.rank == 0:
        o[0] = 1; o[1] = 1; o[2] = 1; o[3] = 1
    elif s.rank == 1:
        o[0] = 1; o[1] = 1; o[2] = 1; o[3] = v[0]
    elif s.rank == 2:
        o[0] = v[0]; o[1] = 1; o[2] = 1; o[3] = v[1]
    elif s.rank == 3:
        o[0] = v[0]; o[1] = 1; o[2] = v[2]; o[3] = v[1]
    else:
        o[0] = v[0]; o[1] = v[2]; o[3] = v[1]
        o[2] = 1
        for i in range(3, s.rank):
            o[2] *= v[i]

cdef int spatial(Ctx* c, int t, Draft* d) except -1:
    """_spatial_params: p[0:4] = n, h, w, c; batch > 1 gives up."""
    hwc4(shp(c, t), d.p)
    if d.p[0] > 1:
        raise GiveUp("batch > 1")
    d.np = 4
    return 0

cdef int const_scalar(Ctx* c, int t, double* v) except -1:
    """_Extractor.value() of a Clip bound: 1 and *v for a one-element value, 0 for none or
    several elements; gives up where the Python side might know a value the native core does not."""
    cdef Tens* e = &c.T[canon(c, t)]
    if not e.const_src or e.vstate == 2:
        raise GiveUp("clip bound")
    if e.vstate == 0 or e.nval != 1:
        return 0
    v[0] = <double>e.ivals[0] if e.is_int else e.vals[0]
    return 1

cdef int clip_kind(Ctx* c, Node* nd) except -1:
    cdef double lo = nd.amin if nd.attrs & A_MIN else -INFINITY
    cdef double hi = nd.amax if nd.attrs & A_MAX else INFINITY
    cdef double v = 0
    cdef int idx
    for idx in range(1, 3):
        if nd.nin > idx and c.ins[nd.in0 + idx] >= 0:
            if not const_scalar(c, c.ins[nd.in0 + idx], &v):
                return K_CLIP
            if idx == 1:
                lo = v
            else:
                hi = v
    if lo == 0 and hi == 6:
        return K_RELU6
    if lo == 0 and hi == INFINITY:
        return K_RELU
    return K_CLIP

cdef int win_params(Ctx* c, Node* nd, Tens* x, int64_t* kern, int64_t* win, int* auto_flag) except -1:
    """_window_attrs (2-D) then _check_window: win = h, w, k_h, k_w, s_h, s_w, d_h, d_w, p_t, p_l, p_b, p_r."""
    cdef int i
    cdef int64_t out, total, small, big, sp, k, st, dl, o
    win[0] = x.dims[2]
    win[1] = x.dims[3]
    win[2] = kern[0]
    win[3] = kern[1]
    for i in range(2):
        win[4 + i] = nd.s[i] if nd.ns else 1
        win[6 + i] = nd.dl[i] if nd.ndl else 1
    for i in range(4):
        win[8 + i] = nd.pads[i] if nd.npads else 0
    auto_flag[0] = 0
    if nd.auto_pad == AP_SAME_UPPER or nd.auto_pad == AP_SAME_LOWER:
        auto_flag[0] = 1
        for i in range(2):
            sp, k, st, dl = win[i], win[2 + i], win[4 + i], win[6 + i]
            out = -fdiv(-sp, st)
            total = (out - 1) * st + (k - 1) * dl + 1 - sp
            if total < 0:
                total = 0
            small = total // 2
            big = total - small
            if nd.auto_pad == AP_SAME_UPPER:
                win[8 + i], win[10 + i] = small, big
            else:
                win[8 + i], win[10 + i] = big, small
    elif nd.auto_pad == AP_VALID:
        auto_flag[0] = 1
        for i in range(4):
            win[8 + i] = 0
    for i in range(2, 8):
        if win[i] < 1:
            raise GiveUp("impossible window")  # (the Python path raises ImpossibleShapeError)
    for i in range(8, 12):
        if win[i] < 0:
            raise GiveUp("negative pads")
    for i in range(2):
        dl = win[6 + i] if nd.op == OP_CONV else 1
        o = fdiv(win[i] + win[8 + i] + win[10 + i] - dl * (win[2 + i] - 1) - 1, win[4 + i]) + 1
        if o < 1:
            raise GiveUp("impossible window")
    return 0

cdef inline int first_output(Ctx* c, Node* nd) noexcept nogil:
    return canon(c, c.outs[nd.out0])

cdef int make_draft(Ctx* c, int i, Draft* d) except -1:
    cdef Node* nd = &c.N[i]
    cdef Node* m
    cdef Tens* x
    cdef Tens* w
    cdef Tens* y
    cdef int64_t win[12]
    cdef int64_t g, c_in, c_out, e0, e1, et
    cdef int j, op, xt, st, mi, mi2, a0, a1, auto_flag
    memset(d, 0, sizeof(Draft))
    d.node = i
    d.node2 = -1
    d.fused_node = -1
    d.fused_node2 = -1
    d.out0 = first_output(c, nd)
    op = nd.op
    if op == OP_CONV:
        xt = canon(c, c.ins[nd.in0])
        if c.T[xt].is_static or not c.T[canon(c, c.ins[nd.in0 + 1])].is_static:
            raise GiveUp("static conv input or dynamic weight")
        x = shp(c, c.ins[nd.in0])
        w = shp(c, c.ins[nd.in0 + 1])
        g = nd.group
        c_in = x.dims[1]
        c_out = w.dims[0]
        win_params(c, nd, x, &w.dims[2], win, &auto_flag)
        d.flag_auto_pad = auto_flag
        if x.dims[0] > 1:
            raise GiveUp("batch > 1")
        if g > 1 and g == c_in and c_out % c_in == 0:
            d.type = L_DWCONV2D
            d.p[0] = x.dims[0]
            d.p[1] = c_in
            d.p[2] = c_out // c_in
            d.p[3] = 1 if nd.nin > 2 and c.ins[nd.in0 + 2] >= 0 else 0
            memcpy(&d.p[4], win, 12 * sizeof(int64_t))
            d.np = 16
        else:
            d.type = L_CONV2D
            d.p[0] = x.dims[0]
            d.p[1] = c_in
            d.p[2] = c_out
            d.p[3] = g
            d.p[4] = 1 if nd.nin > 2 and c.ins[nd.in0 + 2] >= 0 else 0
            memcpy(&d.p[5], win, 12 * sizeof(int64_t))
            d.np = 17
        d.check_shape = 1
    elif op == OP_MAXPOOL or op == OP_AVGPOOL:
        x = shp(c, c.ins[nd.in0])
        # (dilations, if given, are all 1: checked by propagate)
        win_params(c, nd, x, nd.k, win, &auto_flag)
        d.flag_auto_pad = auto_flag
        if x.dims[0] > 1:
            raise GiveUp("batch > 1")
        d.type = L_MAXPOOL if op == OP_MAXPOOL else L_AVGPOOL
        d.p[0] = x.dims[0]
        d.p[1] = x.dims[1]
        memcpy(&d.p[2], win, 6 * sizeof(int64_t))  # h, w, k_h, k_w, s_h, s_w
        memcpy(&d.p[8], &win[8], 4 * sizeof(int64_t))  # p_t, p_l, p_b, p_r
        d.np = 12
        d.check_shape = 1
    elif op == OP_GAP or op == OP_GMP:
        d.type = L_GLOBALPOOL
        spatial(c, c.ins[nd.in0], d)
        d.p[4] = 1 if op == OP_GMP else 0
    elif op == OP_REDUCEMEAN or op == OP_REDUCEMAX:
        x = shp(c, c.ins[nd.in0])
        if x.rank != 4:
            raise GiveUp("reduce rank")
        # (the axes were read by propagate: 2 and 3 exactly, in any order and sign)
        if c.opset >= 18:
            const_ints(c, c.ins[nd.in0 + 1], win, &j)
        else:
            j = nd.naxes
            memcpy(win, nd.axes, j * sizeof(int64_t))
        a0 = 0
        a1 = 0
        for mi in range(j):
            if win[mi] % 4 == 2 or win[mi] % 4 == -2:
                a0 += 1
            elif win[mi] % 4 == 3 or win[mi] % 4 == -1:
                a1 += 1
            else:
                raise GiveUp("reduce over other axes")
        if j != 2 or a0 != 1 or a1 != 1:
            raise GiveUp("reduce over other axes")
        d.type = L_GLOBALPOOL
        spatial(c, c.ins[nd.in0], d)
        d.p[4] = 1 if op == OP_REDUCEMAX else 0
    elif op == OP_ADD or op == OP_SUB or op == OP_MUL or op == OP_DIV:
        d.type = L_ADD if op == OP_ADD or op == OP_SUB else L_MUL
        y = shp(c, c.outs[nd.out0])
        spatial(c, c.outs[nd.out0], d)
        et = nelem(y)
        e0 = nelem(shp(c, c.ins[nd.in0]))
        e1 = nelem(shp(c, c.ins[nd.in0 + 1]))
        if y.rank >= 5 and min(e0, e1) <= 1:
            raise GiveUp("rank >= 5 with a scalar operand (read as rows by the Python importer)")
        if min(e0, e1) != et or max(e0, e1) != et:
            d.p[4] = 1
            d.p[5] = max(min(e0, e1), 1)
            d.np = 6
        if c.T[canon(c, c.ins[nd.in0])].is_static or c.T[canon(c, c.ins[nd.in0 + 1])].is_static:
            d.flag_const = 1
    elif op == OP_CONCAT:
        y = shp(c, c.outs[nd.out0])
        if y.rank != 4 and y.rank != 3:
            raise GiveUp("concat rank")
        if (nd.axis % y.rank if nd.axis >= 0 else nd.axis + y.rank) != 1:
            raise GiveUp("concat along another axis")
        d.type = L_CONCAT
        hwc4(y, win)  # n, h, w, c
        if win[0] > 1:
            raise GiveUp("batch > 1")
        d.p[0] = win[0]
        d.p[1] = win[1]
        d.p[2] = win[2]
        d.np = 3
    elif op == OP_FLATTEN or op == OP_RESHAPE:
        d.type = L_RESHAPE
        spatial(c, c.ins[nd.in0], d)
    elif op == OP_GEMM:
        x = shp(c, c.ins[nd.in0])
        w = shp(c, c.ins[nd.in0 + 1])
        if not c.T[canon(c, c.ins[nd.in0 + 1])].is_static or c.T[canon(c, c.ins[nd.in0])].is_static:
            raise GiveUp("gemm as matmul")
        if not (nd.nin > 2 and c.ins[nd.in0 + 2] >= 0):
            raise GiveUp("gemm without bias (a following Add may fold)")
        d.type = L_FC
        d.p[0] = x.dims[1] if nd.transA else x.dims[0]
        d.p[1] = x.dims[0] if nd.transA else x.dims[1]
        d.p[2] = w.dims[0] if nd.transB else w.dims[1]
        d.p[3] = 1
        d.np = 4
    elif (op == OP_CLIP or op == OP_RELU or op == OP_SIGMOID or op == OP_HARDSIGMOID or op == OP_HARDSWISH
          or op == OP_TANH or op == OP_LEAKYRELU):
        d.type = L_ACT
        if op == OP_CLIP:
            d.kind = clip_kind(c, nd)
        elif op == OP_RELU:
            d.kind = K_RELU
        elif op == OP_SIGMOID:
            d.kind = K_SIGMOID
        elif op == OP_HARDSIGMOID:
            d.kind = K_HARDSIGMOID
        elif op == OP_HARDSWISH:
            d.kind = K_HARDSWISH
        elif op == OP_TANH:
            d.kind = K_TANH
        else:
            d.kind = K_LEAKYRELU
        xt = canon(c, c.ins[nd.in0])
        if op == OP_SIGMOID or (op == OP_HARDSIGMOID and fabs(nd.alpha - 1.0 / 6) < 1e-3
                                and fabs(nd.beta - 0.5) < 1e-6):
            st = canon(c, c.outs[nd.out0])
            if c.T[st].ncons == 1 and c.N[c.T[st].cons1].op == OP_MUL and not c.T[st].is_gout:
                mi = c.T[st].cons1
                m = &c.N[mi]
                a0 = -1
                a1 = -1
                j = 0
                for mi2 in range(m.nin):
                    if c.ins[m.in0 + mi2] >= 0:
                        if j == 0:
                            a0 = canon(c, c.ins[m.in0 + mi2])
                        elif j == 1:
                            a1 = canon(c, c.ins[m.in0 + mi2])
                        j += 1
                if (j == 2 and xt != st and not m.claimed
                        and ((a0 == xt and a1 == st) or (a0 == st and a1 == xt))):
                    d.node2 = mi
                    m.claimed = 1
                    d.out0 = first_output(c, m)
                    d.kind = K_SILU if op == OP_SIGMOID else K_HARDSWISH
        spatial(c, c.ins[nd.in0], d)
    else:
        raise GiveUp("op")
    return 0

cdef int fuse(Ctx* c, Draft* D, int n, int* prod, const uint8_t* table, bint single) except -1:
    """_Extractor._fuse (every draft has exactly one output)."""
    cdef int i, j, x, k, cn
    cdef Draft* d
    cdef Draft* p
    cdef bint ok
    for i in range(n):
        d = &D[i]
        if d.type == L_ACT and d.kind != K_NONE:
            x = canon(c, c.ins[c.N[d.node].in0])
            j = prod[x]
            if j >= 0:
                p = &D[j]
                if not p.dead and p.act == K_NONE and p.out0 == x and table[p.type * N_KINDS + d.kind]:
                    ok = 1
                    if single:
                        if c.T[x].is_gout or c.T[x].ncons > 2:
                            ok = 0
                        else:
                            for k in range(c.T[x].ncons):
                                cn = c.T[x].cons1 if k == 0 else c.T[x].cons2
                                if cn != d.node and cn != d.node2:
                                    ok = 0
                    if ok:
                        p.act = d.kind
                        p.fused_node = d.node
                        p.fused_node2 = d.node2
                        p.out0 = d.out0
                        d.dead = 1
                        prod[p.out0] = j
                        continue
        prod[d.out0] = i
    return 0

# ------------------------------------------------------------------ Python results

cdef inline str tname(Ctx* c, list cache, int t):
    cdef object s = cache[t]
    if s is None:
        s = (<const char*>c.T[t].name)[:c.T[t].nlen].decode("utf-8")
        cache[t] = s
    return <str>s

cdef inline str nname(Node* nd):
    return (<const char*>nd.name)[:nd.nlen].decode("utf-8")

cdef tuple shape_of(Tens* e):
    cdef int i
    return tuple([e.dims[i] for i in range(e.rank)])

cdef list act_inputs(Ctx* c, Node* nd, list cache, dict shapes):
    """_Extractor.act_inputs: the canonical non-static inputs, in order (repeats kept)."""
    cdef list out = []
    cdef int j, t
    cdef str s
    for j in range(nd.nin):
        t = c.ins[nd.in0 + j]
        if t < 0:
            continue
        t = canon(c, t)
        if c.T[t].is_static:
            continue
        s = tname(c, cache, t)
        if s not in shapes:
            shapes[s] = shape_of(&c.T[t])
        out.append(s)
    return out

cdef dict make_params(Ctx* c, Draft* d):
    cdef int64_t* p = d.p
    cdef int j, t
    cdef Node* nd
    if d.type == L_CONV2D:
        return {"n": p[0], "c_in": p[1], "c_out": p[2], "groups": p[3], "bias": p[4],
                "h": p[5], "w": p[6], "k_h": p[7], "k_w": p[8], "s_h": p[9], "s_w": p[10],
                "d_h": p[11], "d_w": p[12], "p_t": p[13], "p_l": p[14], "p_b": p[15], "p_r": p[16]}
    if d.type == L_DWCONV2D:
        return {"n": p[0], "c": p[1], "multiplier": p[2], "bias": p[3],
                "h": p[4], "w": p[5], "k_h": p[6], "k_w": p[7], "s_h": p[8], "s_w": p[9],
                "d_h": p[10], "d_w": p[11], "p_t": p[12], "p_l": p[13], "p_b": p[14], "p_r": p[15]}
    if d.type == L_MAXPOOL or d.type == L_AVGPOOL:
        return {"n": p[0], "c": p[1], "h": p[2], "w": p[3], "k_h": p[4], "k_w": p[5], "s_h": p[6], "s_w": p[7],
                "p_t": p[8], "p_l": p[9], "p_b": p[10], "p_r": p[11]}
    if d.type == L_FC:
        return {"m": p[0], "c_in": p[1], "c_out": p[2], "bias": p[3]}
    if d.type == L_GLOBALPOOL:
        return {"n": p[0], "h": p[1], "w": p[2], "c": p[3], "mode": "max" if p[4] else "avg"}
    if d.type == L_ACT:
        return {"n": p[0], "h": p[1], "w": p[2], "c": p[3], "kind": _KINDS[d.kind]}
    if d.type == L_CONCAT:
        nd = &c.N[d.node]
        return {"n": p[0], "h": p[1], "w": p[2],
                "channels": [c.T[c.ins[nd.in0 + j]].dims[1] for j in range(nd.nin) if c.ins[nd.in0 + j] >= 0]}
    out = {"n": p[0], "h": p[1], "w": p[2], "c": p[3]}  # add, mul, reshape
    if d.np == 6:
        out["broadcast"] = p[4]
        out["elems_b"] = p[5]
    return out


cdef dict _FOLD_TABLES = {}

cdef bytes fold_table(rules):
    cdef bytes t = _FOLD_TABLES.get(rules)
    if t is None:
        t = bytes([1 if k and rules.folds(_TYPES[ty], _KINDS[k]) else 0
                   for ty in range(N_LTYPES) for k in range(N_KINDS)])
        if len(_FOLD_TABLES) > 64:
            _FOLD_TABLES.clear()
        _FOLD_TABLES[rules] = t
    return t


def extract(data, rules):
    """What :func:`estimator.onnx_import.load_network` needs to build the network of the ONNX
    model ``data`` (bytes) under fusion ``rules``, or None where the native core does not
    reproduce the Python importer exactly (the caller then runs the Python importer).

    Returns ``(drafts, free, shapes, graph_inputs, inputs, outputs, opset, name, n_dataless,
    first_dataless)``: ``drafts`` as tuples of :class:`_Draft`'s fields in order, ``free``
    {node: reason}, ``shapes`` {tensor: shape} for every tensor a draft reads or writes,
    ``graph_inputs`` the set of graph input names, ``inputs`` {name: shape}, ``outputs``
    {name: shape}, the default-domain opset, the graph's name, the number of initializers
    without data and the name of the first one.
    """
    return _extract(data, rules, False)


def why_not(data, rules):
    """Why :func:`extract` gives up on ``data`` (a short reason), or None when it does not."""
    return _extract(data, rules, True)


cdef object _extract(data, rules, bint explain):
    cdef const uint8_t[::1] mv = data
    cdef Ctx c
    cdef Draft* D = NULL
    cdef int* prod = NULL
    cdef int n = 0, i
    cdef Node* nd
    cdef bytes table = fold_table(rules)
    if mv.shape[0] == 0:
        return "empty" if explain else None
    ctx_init(&c, mv.shape[0])
    try:
        try:
            parse_model(&c, &mv[0], mv.shape[0])
            if c.ndataless == 0:
                return "every initializer carries data (the Python path may run onnxsim)" if explain else None
            validate(&c)
            propagate(&c)
            graph_pass(&c)
            D = <Draft*>malloc(c.nn * sizeof(Draft))
            prod = <int*>malloc(c.nt * sizeof(int))
            if D == NULL or prod == NULL:
                raise MemoryError()
            for i in range(c.nt):
                prod[i] = -1
            res = build(&c, D, prod, table, rules.single_consumer)
            return None if explain else res
        except GiveUp as e:
            return str(e) if explain else None
    finally:
        free(D)
        free(prod)
        ctx_free(&c)


cdef object build(Ctx* c, Draft* D, int* prod, bytes table, bint single):
    cdef list cache = [None] * c.nt
    cdef dict free_ = {}
    cdef dict shapes = {}
    cdef list drafts = []
    cdef dict names = {}
    cdef int i, n = 0, j, t
    cdef Node* nd
    cdef Draft* d
    cdef str s
    cdef object reasons = _oi._FREE_OPS
    cdef str dead = _oi._DEAD_CODE
    noop_reasons = (None, reasons["Identity"], reasons["Dropout"], _oi._CONCAT_NOOP)
    # unique node names (the Python path renames duplicates)
    for i in range(c.nn):
        s = nname(&c.N[i])
        if s in names:
            raise GiveUp("duplicate node name")
        names[s] = i
    node_names = list(names)
    for i in range(c.nn):
        nd = &c.N[i]
        if nd.claimed:
            continue
        if not nd.live:
            free_[node_names[i]] = dead
            continue
        if nd.noop:
            free_[node_names[i]] = noop_reasons[nd.noop] if nd.noop < 4 else _oi._noop_same_shape(_OP_NAMES[nd.op])
            continue
        if nd.op == OP_CONSTANT:
            free_[node_names[i]] = reasons["Constant"]
            continue
        make_draft(c, i, &D[n])
        n += 1
    fuse(c, D, n, prod, table, single)
    for i in range(n):
        d = &D[i]
        if d.dead:
            continue
        nd = &c.N[d.node]
        nodes = [node_names[d.node]]
        if d.node2 >= 0:
            nodes.append(node_names[d.node2])
        if d.fused_node >= 0:
            nodes.append(node_names[d.fused_node])
            if d.fused_node2 >= 0:
                nodes.append(node_names[d.fused_node2])
        if d.type == L_ACT or d.type == L_RESHAPE or d.type == L_CONV2D or d.type == L_DWCONV2D:
            t = canon(c, c.ins[nd.in0])
            s = tname(c, cache, t)
            if s not in shapes:
                shapes[s] = shape_of(&c.T[t])
            inputs = [s]
        else:
            inputs = act_inputs(c, nd, cache, shapes)
        s = tname(c, cache, d.out0)
        if s not in shapes:
            shapes[s] = shape_of(&c.T[d.out0])
        flags = []
        if d.flag_auto_pad:
            flags.append("auto_pad")
        if d.flag_const:
            flags.append("const_operand")
        drafts.append((_TYPES[d.type], make_params(c, d), _OP_NAMES[nd.op], nodes, inputs, [s], flags,
                       _KINDS[d.kind], _KINDS[d.act], 0, bool(d.check_shape)))
    graph_inputs = set()
    inputs_ = {}
    for i in range(c.ngin):
        t = c.gin[i]
        s = tname(c, cache, t)
        graph_inputs.add(s)
        inputs_[s] = shape_of(&c.T[t])
    outputs = {}
    for i in range(c.ngout):
        t = c.gout[i]
        outputs[tname(c, cache, t)] = shape_of(&c.T[t])
    name = (<const char*>c.gname)[:c.gnlen].decode("utf-8") if c.gnlen else ""
    first = (<const char*>c.first_dataless)[:c.first_dataless_len].decode("utf-8")
    return drafts, free_, shapes, graph_inputs, inputs_, outputs, <long>c.opset, name, c.ndataless, first
