"""The host macros and types nvcc's headers give a kernel and NVRTC does not, handed to NVRTC in
memory: ``PRELUDE`` is pre-included in every compilation, and ``HEADERS`` answer the C headers
a kernel may include by name (``<cstdint>``, ``<climits>``, ``<cfloat>``, ``<cstddef>``).

So a kernel written for nvcc compiles unchanged: ``INFINITY``, ``NAN``, ``HUGE_VALF``, ``M_PI``,
``FLT_MAX``, ``INT_MAX``, ``uint32_t``... Values are glibc's (what nvcc sees on Linux); where
libcu++ (``<cuda/std/climits>``, ``<cuda/std/cstdint>``) defines the same name under NVRTC, the
definition here is token for token the same, so including both is no redefinition. libcu++'s
``<cuda/std/cmath>`` defines ``INFINITY`` and ``NAN`` its own way; that redefinition, and one a
kernel makes itself, is not warned about (diagnostic 47), as if nvcc's host header had been
written with the kernel's own definition. Each macro is behind its own ``#ifndef``, so a ``-D``
define wins.
Nothing here is a file: NVRTC reads no host header.
"""

from __future__ import annotations

PRELUDE_NAME = "cudaopt_host_defs.h"

# As libcu++'s <cuda/std/climits> defines them under NVRTC, token for token.
_LIMITS = [
    ("CHAR_BIT", "8"), ("SCHAR_MIN", "(-128)"), ("SCHAR_MAX", "127"), ("UCHAR_MAX", "255"),
    ("__CHAR_UNSIGNED__", "('\\xff' > 0)"), ("SHRT_MIN", "(-SHRT_MAX - 1)"), ("SHRT_MAX", "0x7fff"),
    ("USHRT_MAX", "0xffff"), ("INT_MIN", "(-INT_MAX - 1)"), ("INT_MAX", "0x7fffffff"), ("UINT_MAX", "0xffffffff"),
    ("LONG_MIN", "(-LONG_MAX - 1)"),
    ("LLONG_MIN", "(-LLONG_MAX - 1)"), ("LLONG_MAX", "0x7fffffffffffffffLL"), ("ULLONG_MAX", "0xffffffffffffffffUL"),
]
_CHAR = ("#ifndef CHAR_MIN\n#if __CHAR_UNSIGNED__\n#define CHAR_MIN 0\n#define CHAR_MAX UCHAR_MAX\n#else\n"
         "#define CHAR_MIN SCHAR_MIN\n#define CHAR_MAX SCHAR_MAX\n#endif\n#endif\n"
         "#ifndef LONG_MAX\n#ifdef __LP64__\n#define LONG_MAX LLONG_MAX\n#define ULONG_MAX ULLONG_MAX\n#else\n"
         "#define LONG_MAX INT_MAX\n#define ULONG_MAX UINT_MAX\n#endif\n#endif\n")
# glibc's <float.h> values, as GCC spells them.
_FLOAT = [
    ("FLT_RADIX", "2"), ("FLT_MANT_DIG", "24"), ("DBL_MANT_DIG", "53"), ("FLT_DIG", "6"), ("DBL_DIG", "15"),
    ("FLT_MIN_EXP", "(-125)"), ("DBL_MIN_EXP", "(-1021)"), ("FLT_MAX_EXP", "128"), ("DBL_MAX_EXP", "1024"),
    ("FLT_MAX", "3.40282346638528859811704183484516925e+38F"),
    ("FLT_MIN", "1.17549435082228750796873653722224568e-38F"),
    ("FLT_EPSILON", "1.19209289550781250000000000000000000e-7F"),
    ("FLT_TRUE_MIN", "1.40129846432481707092372958328991613e-45F"),
    ("DBL_MAX", "1.79769313486231570814527423731704357e+308"),
    ("DBL_MIN", "2.22507385850720138309023271733240406e-308"),
    ("DBL_EPSILON", "2.22044604925031308084726333618164062e-16"),
    ("DBL_TRUE_MIN", "4.94065645841246544176568792868221372e-324"),
]
# glibc's <math.h>; NVRTC has no __builtin_huge_valf, and a bit cast is as constant.
_MATH = [
    ("INFINITY", "(__builtin_bit_cast(float, 0x7f800000u))"), ("NAN", "(__builtin_bit_cast(float, 0x7fc00000u))"),
    ("HUGE_VALF", "(__builtin_bit_cast(float, 0x7f800000u))"),
    ("HUGE_VAL", "(__builtin_bit_cast(double, 0x7ff0000000000000ull))"),
    ("M_E", "2.7182818284590452354"), ("M_LOG2E", "1.4426950408889634074"), ("M_LOG10E", "0.43429448190325182765"),
    ("M_LN2", "0.69314718055994530942"), ("M_LN10", "2.30258509299404568402"), ("M_PI", "3.14159265358979323846"),
    ("M_PI_2", "1.57079632679489661923"), ("M_PI_4", "0.78539816339744830962"), ("M_1_PI", "0.31830988618379067154"),
    ("M_2_PI", "0.63661977236758134308"), ("M_2_SQRTPI", "1.12837916709551257390"),
    ("M_SQRT2", "1.41421356237309504880"), ("M_SQRT1_2", "0.70710678118654752440"),
]
# As <cuda/std/cstdint> declares them under NVRTC (redeclaring an alias to the same type is
# allowed), and its limit macros with the same tokens.
_INTS = """\
using int8_t   = signed char;
using int16_t  = signed short;
using int32_t  = signed int;
using int64_t  = signed long long;
using uint8_t  = unsigned char;
using uint16_t = unsigned short;
using uint32_t = unsigned int;
using uint64_t = unsigned long long;
using intptr_t  = int64_t;
using uintptr_t = uint64_t;
using intmax_t  = int64_t;
using uintmax_t = uint64_t;
"""
_INT_LIMITS = [
    ("INT8_MIN", "SCHAR_MIN"), ("INT16_MIN", "SHRT_MIN"), ("INT32_MIN", "INT_MIN"), ("INT64_MIN", "LLONG_MIN"),
    ("INT8_MAX", "SCHAR_MAX"), ("INT16_MAX", "SHRT_MAX"), ("INT32_MAX", "INT_MAX"), ("INT64_MAX", "LLONG_MAX"),
    ("UINT8_MAX", "UCHAR_MAX"), ("UINT16_MAX", "USHRT_MAX"), ("UINT32_MAX", "UINT_MAX"),
    ("UINT64_MAX", "ULLONG_MAX"), ("SIZE_MAX", "UINT64_MAX"),
]


def _defines(pairs: list[tuple[str, str]]) -> str:
    """Each macro behind its own #ifndef, so a -D define of any one of them wins."""
    return "".join(f"#ifndef {name}\n#define {name} {value}\n#endif\n" for name, value in pairs)


PRELUDE = ("#pragma nv_diag_suppress 47\n" + _defines(_LIMITS) + _CHAR + _defines(_FLOAT) + _defines(_MATH)
           + _INTS + _defines(_INT_LIMITS))

_STD_INTS = ("int8_t", "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t", "uint64_t",
             "intptr_t", "uintptr_t", "intmax_t", "uintmax_t")
_CSTDINT = "#pragma once\nnamespace std {\n" + "".join(f"using ::{t};\n" for t in _STD_INTS) + "}\n"
_CSTDDEF = ("#pragma once\n#ifndef NULL\n#define NULL 0\n#endif\n"
            "namespace std {\nusing ::size_t;\nusing ::ptrdiff_t;\nusing nullptr_t = decltype(nullptr);\n}\n")
_EMPTY = "#pragma once\n"  # the prelude already defines everything these headers declare

HEADERS = {
    PRELUDE_NAME: PRELUDE,
    "cstdint": _CSTDINT, "stdint.h": _EMPTY, "climits": _EMPTY, "limits.h": _EMPTY,
    "cfloat": _EMPTY, "float.h": _EMPTY, "cstddef": _CSTDDEF, "stddef.h": _EMPTY,
}
