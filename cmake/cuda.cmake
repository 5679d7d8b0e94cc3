# The CUDA toolchain for the CUDA backend (TF_CUDA=ON), included from src/backend/cuda.
#
# sm_90 (H200/H100) unless the caller chose architectures (-DCMAKE_CUDA_ARCHITECTURES=...).
# Set before enable_language so CMake's compiler check does not probe nvcc's default arch.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "")
  set(CMAKE_CUDA_ARCHITECTURES 90)
endif()
enable_language(CUDA)
# C++17 in the .cu files: CMake 3.25 does not know how to ask nvcc for C++20, and the kernels
# need nothing newer (the C++20 front half is cuda_backend.cpp, compiled by the C++ compiler).
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
set(CMAKE_CUDA_EXTENSIONS OFF)
# cudart is linked statically (CUDA::cudart_static), cuBLAS as the shared library the
# device machine has (CUDA::cublas).
find_package(CUDAToolkit REQUIRED)
