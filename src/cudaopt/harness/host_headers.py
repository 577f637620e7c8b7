"""The host macros and types nvcc's headers give a kernel and NVRTC does not, handed to NVRTC in
memory: ``PRELUDE`` is pre-included in every compilation, and ``HEADERS`` answer the C headers
a kernel may include by name (``<cstdint>``, ``<climits>``, ``<cfloat>``, ``<cstddef>``).

So a kernel written for nvcc compiles unchanged: ``INFINITY``, ``NAN``, ``HUGE_VALF``, ``M_PI``,
``FLT_MAX``, ``INT_MAX``, ``uint32_t``... Values are glibc's (what nvcc sees on Linux); where
libcu++ (``<cuda/std/climits>``, ``<cuda/std/cstdint>``) defines the same name under NVRTC, the
definition here is token for token the same, so including both is no redefinition. libcu++'s
``<cuda/std/cmath>`` defines ``INFINITY`` and ``NAN`` its own way; that redefinition, and one a
kernel makes itself, is not warned about (diagnostic 47), as if nvcc's host header had been
written with the kernel's own definition. Everything is behind ``#ifndef``, so ``-D`` defines win.
Nothing here is a file: NVRTC reads no host header.
"""

from __future__ import annotations

PRELUDE_NAME = "cudaopt_host_defs.h"

_LIMITS = """\
#ifndef CHAR_BIT
#define CHAR_BIT 8
#define SCHAR_MIN         (-128)
#define SCHAR_MAX         127
#define UCHAR_MAX         255
#define __CHAR_UNSIGNED__ ('\\xff' > 0)
#if __CHAR_UNSIGNED__
#define CHAR_MIN 0
#define CHAR_MAX UCHAR_MAX
#else
#define CHAR_MIN SCHAR_MIN
#define CHAR_MAX SCHAR_MAX
#endif
#define SHRT_MIN  (-SHRT_MAX - 1)
#define SHRT_MAX  0x7fff
#define USHRT_MAX 0xffff
#define INT_MIN   (-INT_MAX - 1)
#define INT_MAX   0x7fffffff
#define UINT_MAX  0xffffffff
#define LONG_MIN  (-LONG_MAX - 1)
#ifdef __LP64__
#define LONG_MAX  LLONG_MAX
#define ULONG_MAX ULLONG_MAX
#else
#define LONG_MAX  INT_MAX
#define ULONG_MAX UINT_MAX
#endif
#define LLONG_MIN  (-LLONG_MAX - 1)
#define LLONG_MAX  0x7fffffffffffffffLL
#define ULLONG_MAX 0xffffffffffffffffUL
#endif
"""

_FLOAT = """\
#ifndef FLT_MAX
#define FLT_RADIX 2
#define FLT_MANT_DIG 24
#define DBL_MANT_DIG 53
#define FLT_DIG 6
#define DBL_DIG 15
#define FLT_MIN_EXP (-125)
#define DBL_MIN_EXP (-1021)
#define FLT_MAX_EXP 128
#define DBL_MAX_EXP 1024
#define FLT_MAX 3.40282346638528859811704183484516925e+38F
#define FLT_MIN 1.17549435082228750796873653722224568e-38F
#define FLT_EPSILON 1.19209289550781250000000000000000000e-7F
#define FLT_TRUE_MIN 1.40129846432481707092372958328991613e-45F
#define DBL_MAX 1.79769313486231570814527423731704357e+308
#define DBL_MIN 2.22507385850720138309023271733240406e-308
#define DBL_EPSILON 2.22044604925031308084726333618164062e-16
#define DBL_TRUE_MIN 4.94065645841246544176568792868221372e-324
#endif
"""

_MATH = """\
#ifndef INFINITY
#define INFINITY (__builtin_bit_cast(float, 0x7f800000u))
#endif
#ifndef NAN
#define NAN (__builtin_bit_cast(float, 0x7fc00000u))
#endif
#ifndef HUGE_VALF
#define HUGE_VALF (__builtin_bit_cast(float, 0x7f800000u))
#endif
#ifndef HUGE_VAL
#define HUGE_VAL (__builtin_bit_cast(double, 0x7ff0000000000000ull))
#endif
#ifndef M_PI
#define M_E        2.7182818284590452354
#define M_LOG2E    1.4426950408889634074
#define M_LOG10E   0.43429448190325182765
#define M_LN2      0.69314718055994530942
#define M_LN10     2.30258509299404568402
#define M_PI       3.14159265358979323846
#define M_PI_2     1.57079632679489661923
#define M_PI_4     0.78539816339744830962
#define M_1_PI     0.31830988618379067154
#define M_2_PI     0.63661977236758134308
#define M_2_SQRTPI 1.12837916709551257390
#define M_SQRT2    1.41421356237309504880
#define M_SQRT1_2  0.70710678118654752440
#endif
"""

# As <cuda/std/cstdint> declares them under NVRTC (a redeclaration of an alias to the same type is
# allowed), and the limit macros with the same tokens.
_STDINT = """\
#ifndef INT8_MIN
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
#define INT8_MIN   SCHAR_MIN
#define INT16_MIN  SHRT_MIN
#define INT32_MIN  INT_MIN
#define INT64_MIN  LLONG_MIN
#define INT8_MAX   SCHAR_MAX
#define INT16_MAX  SHRT_MAX
#define INT32_MAX  INT_MAX
#define INT64_MAX  LLONG_MAX
#define UINT8_MAX  UCHAR_MAX
#define UINT16_MAX USHRT_MAX
#define UINT32_MAX UINT_MAX
#define UINT64_MAX ULLONG_MAX
#define SIZE_MAX UINT64_MAX
#endif
"""

PRELUDE = "#pragma nv_diag_suppress 47\n" + _LIMITS + _FLOAT + _MATH + _STDINT

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
