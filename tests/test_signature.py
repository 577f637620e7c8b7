import pytest

from cudaopt.wire.signature import SignatureError, find_entry, parse_signature

SGEMM = 'extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)'


def test_parse_sgemm():
    sig = parse_signature(SGEMM)
    assert sig.name == "matmul_f32"
    assert [a.name for a in sig.inputs] == ["a", "b"]
    assert [a.name for a in sig.outputs] == ["c"]
    assert [(a.name, a.dtype) for a in sig.scalars] == [("m", "int32"), ("n", "int32"), ("k", "int32")]
    assert parse_signature(str(sig)) == sig


@pytest.mark.parametrize(
    "decl,dtype,pointer,const",
    [
        ("const __half* __restrict__ x", "float16", True, True),
        ("__nv_bfloat16* y", "bfloat16", True, False),
        ("double const* z", "float64", True, True),
        ("float* const w", "float32", True, False),
        ("const int8_t* q", "int8", True, True),
        ("unsigned char* u", "uint8", True, False),
        ("long long n", "int64", False, False),
        ("const float alpha", "float32", False, False),
        ("int64_t* idx", "int64", True, False),
    ],
)
def test_argument_types(decl, dtype, pointer, const):
    (arg,) = parse_signature(f'extern "C" __global__ void f({decl})').args
    assert (arg.dtype, arg.pointer, arg.const) == (dtype, pointer, const)


@pytest.mark.parametrize(
    "text,message",
    [
        ("void f(int n)", "expected a declaration"),
        ('extern "C" __global__ void f(std::complex<float>* z)', "unsupported type"),
        ('extern "C" __global__ void f(float** p)', "pointers to pointers"),
        ('extern "C" __global__ void f(float)', "needs a type and a name"),
        ('extern "C" __global__ void f(int a, int a)', "appears twice"),
    ],
)
def test_bad_signatures_say_why(text, message):
    with pytest.raises(SignatureError, match=message):
        parse_signature(text)


def test_find_entry_handles_launch_bounds_and_comments():
    source = """
    // extern "C" __global__ void matmul_f32(int wrong)
    extern "C" __global__ void helper(float* x) {}
    extern "C" __global__ void __launch_bounds__(256, 2)
    matmul_f32(const float* __restrict__ a, const float* __restrict__ b, float* c, int m, int n, int k) {}
    """
    found = find_entry(source, "matmul_f32")
    assert found is not None and found.same_types(parse_signature(SGEMM))
    assert find_entry(source, "missing") is None


def test_same_types_notices_a_changed_argument():
    other = parse_signature('extern "C" __global__ void g(const float* a, const float* b, float* c, int m, int n, long long k)')
    assert not parse_signature(SGEMM).same_types(other)
