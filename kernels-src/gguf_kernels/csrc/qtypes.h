// ggml types of the supported formats: type ids (enum ggml_type in ggml.h;
// gguf.GGMLQuantizationType) and block geometry (ggml-common.h). Plain C++ (the torch binding
// includes it).
#pragma once

namespace gq {

enum QType : int {
  Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14,
  IQ4_NL = 20, IQ4_XS = 23, MXFP4 = 39, NVFP4 = 40,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ3_S = 21, IQ2_S = 22, IQ1_M = 29,
};

// X(T) for the types the quantize kernels write (byte-exact with llama.cpp's reference quantizers).
#define GQ_FOR_EACH_QUANT_TYPE(X) \
  X(Q4_0) X(Q4_1) X(Q5_0) X(Q5_1) X(Q8_0) X(Q2_K) X(Q3_K) X(Q4_K) X(Q5_K) X(Q6_K) X(IQ4_NL) X(IQ4_XS) X(MXFP4)
// X(T) for every type above (the others are read only: NVFP4, and the i-quants, whose decoders are in
// iq_blocks.cuh).
#define GQ_FOR_EACH_TYPE(X) \
  GQ_FOR_EACH_QUANT_TYPE(X) X(NVFP4) X(IQ2_XXS) X(IQ2_XS) X(IQ2_S) X(IQ3_XXS) X(IQ3_S) X(IQ1_S) X(IQ1_M)

// Elements and bytes per block.
template <int T> struct Traits;
template <> struct Traits<Q4_0>   { static constexpr int BLOCK = 32,  BYTES = 18;  };
template <> struct Traits<Q4_1>   { static constexpr int BLOCK = 32,  BYTES = 20;  };
template <> struct Traits<Q5_0>   { static constexpr int BLOCK = 32,  BYTES = 22;  };
template <> struct Traits<Q5_1>   { static constexpr int BLOCK = 32,  BYTES = 24;  };
template <> struct Traits<Q8_0>   { static constexpr int BLOCK = 32,  BYTES = 34;  };
template <> struct Traits<Q2_K>   { static constexpr int BLOCK = 256, BYTES = 84;  };
template <> struct Traits<Q3_K>   { static constexpr int BLOCK = 256, BYTES = 110; };
template <> struct Traits<Q4_K>   { static constexpr int BLOCK = 256, BYTES = 144; };
template <> struct Traits<Q5_K>   { static constexpr int BLOCK = 256, BYTES = 176; };
template <> struct Traits<Q6_K>   { static constexpr int BLOCK = 256, BYTES = 210; };
template <> struct Traits<IQ4_NL> { static constexpr int BLOCK = 32,  BYTES = 18;  };
template <> struct Traits<IQ4_XS> { static constexpr int BLOCK = 256, BYTES = 136; };
template <> struct Traits<MXFP4>  { static constexpr int BLOCK = 32,  BYTES = 17;  };
template <> struct Traits<NVFP4>  { static constexpr int BLOCK = 64,  BYTES = 36;  };
template <> struct Traits<IQ2_XXS> { static constexpr int BLOCK = 256, BYTES = 66;  };
template <> struct Traits<IQ2_XS>  { static constexpr int BLOCK = 256, BYTES = 74;  };
template <> struct Traits<IQ2_S>   { static constexpr int BLOCK = 256, BYTES = 82;  };
template <> struct Traits<IQ3_XXS> { static constexpr int BLOCK = 256, BYTES = 98;  };
template <> struct Traits<IQ3_S>   { static constexpr int BLOCK = 256, BYTES = 110; };
template <> struct Traits<IQ1_S>   { static constexpr int BLOCK = 256, BYTES = 50;  };
template <> struct Traits<IQ1_M>   { static constexpr int BLOCK = 256, BYTES = 56;  };

}  // namespace gq
