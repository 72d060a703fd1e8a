# Finds every dependency once; the configure summary reports what was found.
find_package(HDF5 REQUIRED COMPONENTS C)
find_package(Eigen3 3.3 REQUIRED NO_MODULE)
find_package(fmt REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(Threads REQUIRED)

# CUDA: AUTO turns it on when nvcc is found (PATH or /usr/local/cuda).
set(LPDIAG_CUDA_ENABLED OFF)
if(NOT LPDIAG_WITH_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # 90a: the Hopper (wgmma) kernels, chosen at run time on compute capability 9.0 devices.
      set(CMAKE_CUDA_ARCHITECTURES 80 90a)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    # LibTorch's CMake resets CMAKE_CUDA_ARCHITECTURES to OFF; keep our own copy for our targets.
    set(LPDIAG_CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}")
    set(LPDIAG_CUDA_ENABLED ON)
  elseif(LPDIAG_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "LPDIAG_WITH_CUDA=ON but no CUDA compiler was found; install CUDA or set CMAKE_CUDA_COMPILER")
  endif()
endif()

# LibTorch: AUTO turns it on when find_package(Torch) succeeds.
set(LPDIAG_TORCH_ENABLED OFF)
if(NOT LPDIAG_WITH_TORCH STREQUAL "OFF")
  find_package(Torch QUIET)
  if(Torch_FOUND)
    set(LPDIAG_TORCH_ENABLED ON)
    # A CUDA build of LibTorch (the GPU machine's 2.11) lets the op and bench/attention run the kernels.
    set(LPDIAG_TORCH_CUDA OFF)
    if(LPDIAG_CUDA_ENABLED AND C10_CUDA_LIBRARY)
      set(LPDIAG_TORCH_CUDA ON)
    endif()
  elseif(LPDIAG_WITH_TORCH STREQUAL "ON")
    message(FATAL_ERROR "LPDIAG_WITH_TORCH=ON but LibTorch was not found; install libtorch-dev or set CMAKE_PREFIX_PATH")
  endif()
endif()

# A compiler whose default link puts a private static libstdc++ into our shared libraries (seen:
# /opt/gcc on the GPU image) breaks them inside PyTorch: two libstdc++ copies share locale state,
# and the first TORCH_CHECK aborts with "free(): invalid pointer". Say so at configure time.
if(LPDIAG_TORCH_ENABLED AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  foreach(_lpdiag_cc ${CMAKE_CXX_COMPILER} ${CMAKE_CUDA_HOST_COMPILER})
    execute_process(COMMAND ${_lpdiag_cc} -print-file-name=libstdc++.so OUTPUT_VARIABLE _lpdiag_libstdcxx
                    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(NOT IS_ABSOLUTE "${_lpdiag_libstdcxx}")
      message(WARNING "${_lpdiag_cc} has no shared libstdc++ (it would link a static copy into lpdiag's shared "
                      "libraries, which then crash inside PyTorch on the first error). Configure a fresh build "
                      "directory with the system compiler: -DCMAKE_CXX_COMPILER=/usr/bin/g++ "
                      "-DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++")
    endif()
  endforeach()
endif()

# Catch2 2.13 (Debian 12) or 3.x (GPU machine); tests/catch_compat.hpp hides the difference.
if(LPDIAG_BUILD_TESTS)
  find_package(Catch2 REQUIRED)
  if(Catch2_VERSION VERSION_GREATER_EQUAL 3)
    set(LPDIAG_CATCH2_V3 ON)
  else()
    set(LPDIAG_CATCH2_V3 OFF)
  endif()
endif()
