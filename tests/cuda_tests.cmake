# The tests labelled cuda, included by tests/CMakeLists.txt in every build with CUDA:
# the nvcc build (they skip loudly where no GPU is visible; scripts/gpu_check runs them
# on a lent GPU) and the emulated build, where they run on the emulated device.
# kernel_table_cuda_test compiles trainer/adamw.cc in as AdamW's CPU twin.
# transformer_kernels_cuda_test: the Transformer's CUDA kernels against their CPU twins.
# cublas_library_test: cuBLAS(Lt) loaded on first use; runs without a device.

# What the GPU machine receives (docs/testing.md "What the GPU machine receives"): in the
# emulated build every test below runs with tests/tools/open_recorder.c preloaded, which
# logs the files it opens for reading in the source tree; gpu_tree_test, after them all
# (fixture gpu_tree), checks each is carried to a lent GPU or in scripts/gpu_bundle's
# overlay. gpu_tree_reset empties the log first. In the nvcc build (no device here: the
# tests skip and open little) gpu_tree_test checks scripts/gpu_check's own paths only.
set(ms_gpu_tree_args /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/tools/gpu_tree_test.py --source=${CMAKE_SOURCE_DIR})
if(MS_CUDA_EMULATED)
  add_library(ms_open_recorder SHARED tools/open_recorder.c)
  target_link_libraries(ms_open_recorder PRIVATE ${CMAKE_DL_LIBS})
  set_target_properties(ms_open_recorder PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  set(ms_open_recorder ${CMAKE_CURRENT_BINARY_DIR}/libms_open_recorder.so)
  set(ms_gpu_tree_log ${CMAKE_BINARY_DIR}/gpu_tree_opens.txt)
  set(ms_gpu_tree_env LD_PRELOAD=${ms_open_recorder} MS_OPEN_ROOT=${CMAKE_SOURCE_DIR} MS_OPEN_LOG=${ms_gpu_tree_log})
  list(APPEND ms_gpu_tree_args --log=${ms_gpu_tree_log} --recorder=${ms_open_recorder} --build=${CMAKE_BINARY_DIR}
       --ctest=${CMAKE_CTEST_COMMAND})
  add_test(NAME gpu_tree_reset COMMAND ${CMAKE_COMMAND} -E rm -f ${ms_gpu_tree_log})
  set_tests_properties(gpu_tree_reset PROPERTIES FIXTURES_SETUP gpu_tree LABELS cuda)
  set(MS_GTEST_FIXTURES gpu_tree)
  set(MS_GTEST_ENVIRONMENT ${ms_gpu_tree_env})
  set(MS_GTEST_DEPENDS ms_open_recorder)
endif()
add_test(NAME gpu_tree_test COMMAND ${ms_gpu_tree_args})
if(MS_CUDA_EMULATED)
  set_tests_properties(gpu_tree_test PROPERTIES FIXTURES_CLEANUP gpu_tree LABELS cuda TIMEOUT 60)
else()  # not label cuda: gpu_check's ctest stage runs in a tree without .git
  set_tests_properties(gpu_tree_test PROPERTIES LABELS unit TIMEOUT 60)
endif()
# ms_gpu_tree_watch(TEST...): the recorder and the fixture on tests added with add_test.
function(ms_gpu_tree_watch)
  if(MS_CUDA_EMULATED)
    set_property(TEST ${ARGN} APPEND PROPERTY ENVIRONMENT ${ms_gpu_tree_env})
    set_property(TEST ${ARGN} APPEND PROPERTY FIXTURES_REQUIRED gpu_tree)
  endif()
endfunction()

ms_add_gtest(cuda_test cuda SOURCES cuda/tanh_norm_cuda_test.cc cuda/screening_cuda_test.cc
  cuda/screening_table_cache_test.cc cuda/pinned_staging_test.cc
  cuda/kernel_table_cuda_test.cc cuda/transformer_kernels_cuda_test.cc cuda/argmax_cuda_test.cc
  cuda/cublas_library_test.cc
  ${CMAKE_SOURCE_DIR}/trainer/adamw.cc
  LIBS ms_kernel_table ms_kernels_cpu ms_kernels_cuda ms_buffer)
# The models (Multiscreen, the Transformer) over the CUDA tables against the CPU's.
ms_add_gtest(model_cuda_test cuda SOURCES cuda/model_cuda_test.cc LIBS ms_model ms_parallel ms_trainer)
# The gradients readied by ZeroGradientsBeforeStep (issue 42) against the filled step, on
# the CPU and the device (a build without CUDA registers it as a unit test instead).
ms_add_gtest(model_zero_gradients_test cuda SOURCES model/zero_gradients_test.cc LIBS ms_model ms_parallel)
# Decoding on the device (issue 29): the decoding caches and the decoders over the CUDA
# table against the CPU's, token by token.
ms_add_gtest(decoder_cuda_test cuda SOURCES cuda/decoder_cuda_test.cc LIBS ms_model ms_kernels_cuda)

if(NOT TARGET parallel_step_test)
  ms_add_mpi_gtest(parallel_step_test parallel/parallel_step_test.cc)
endif()
# On the GPU (label cuda and gpu_layouts: scripts/gpu_check runs them in a stage of their
# own): ranks sharing cuda:0 through the staged path, against the CPU single process.
foreach(layout "2;1;1" "1;2;2")
  list(GET layout 0 tp)
  list(GET layout 1 pp)
  list(GET layout 2 dp)
  math(EXPR np "${tp} * ${pp} * ${dp}")
  set(test parallel_step_cuda_staged_tp${tp}_pp${pp}_dp${dp})
  add_test(NAME ${test} COMMAND ${MS_MPIRUN} ${MPIEXEC_NUMPROC_FLAG} ${np} $<TARGET_FILE:parallel_step_test>
    ${MPIEXEC_POSTFLAGS} --tp=${tp} --pp=${pp} --staged --device=cuda --gtest_filter=MicroBatches/*)
  set_tests_properties(${test} PROPERTIES LABELS "cuda;gpu_layouts" TIMEOUT 120 PROCESSORS ${np}
    ENVIRONMENT "${MS_MPI_TEST_ENV}" SKIP_REGULAR_EXPRESSION "\\*\\*\\* SKIPPED")
  ms_gpu_tree_watch(${test})
endforeach()

# NCCL: compiled with CUDA; skipped loudly where no GPU is visible.
if(TARGET ms_parallel_nccl)
  ms_add_mpi_gtest(nccl_communicator_test parallel/nccl_communicator_test.cc)
  target_link_libraries(nccl_communicator_test PRIVATE ms_parallel_nccl ms_buffer)
  add_test(NAME nccl_communicator_single COMMAND nccl_communicator_test)
  set_tests_properties(nccl_communicator_single PROPERTIES LABELS cuda TIMEOUT 120
    SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\] [0-9]+ tests?, listed below")
  add_test(NAME nccl_communicator_np2 COMMAND ${MS_MPIRUN} ${MPIEXEC_NUMPROC_FLAG} 2
    $<TARGET_FILE:nccl_communicator_test>)
  # A GPU per rank (MULTISCREEN_EMULATED_GPUS: the emulated device's count; the CUDA
  # runtime ignores it).
  set_tests_properties(nccl_communicator_np2 PROPERTIES LABELS cuda TIMEOUT 120
    ENVIRONMENT "${MS_MPI_TEST_ENV};MULTISCREEN_EMULATED_GPUS=2")
  ms_gpu_tree_watch(nccl_communicator_single nccl_communicator_np2)
endif()

# The tensor-core primitives (kernels/cuda/tensor_core.cuh: mma.sync, ldmatrix, cp.async)
# against plain products on the host: the emulated twins here, the instructions on a GPU.
ms_add_gtest(tensor_core_test cuda SOURCES kernels/tensor_core_test.cu LIBS CUDA::cudart)
if(MS_CUDA_EMULATED)
  ms_emulated_cuda_sources(tensor_core_test kernels/tensor_core_test.cu)
endif()

# The per-node cost of a replayed CUDA graph against one-by-one launches (issue 42): on the
# emulated device the code path (every launch and node runs), on a GPU the µs per node that
# scripts/gpu_check's graph_probe stage prints for tools/perf_model.py --graph-node-us.
ms_add_gtest(graph_node_probe_test cuda SOURCES kernels/graph_node_probe_test.cu LIBS CUDA::cudart)
if(MS_CUDA_EMULATED)
  ms_emulated_cuda_sources(graph_node_probe_test kernels/graph_node_probe_test.cu)
endif()

# The tiled tensor-core screening forward and backward (kernels/cuda/screening_tiled.h)
# against the simple CUDA kernel at ragged lengths, every window kind, r near 0 and 1 (issue 29).
ms_add_gtest(screening_tiled_test cuda SOURCES kernels/screening_tiled_test.cc LIBS ms_kernels_cuda ms_kernels_cpu ms_buffer)

# The tiled tensor-core softmax attention forward and backward (kernels/cuda/attention_tiled.h)
# against the simple CUDA kernel and the CPU's fp64 one at ragged lengths, typical, peaked and
# flat softmax (issue 29).
ms_add_gtest(attention_tiled_test cuda SOURCES cuda/attention_tiled_test.cc LIBS ms_kernels_cuda ms_kernels_cpu ms_buffer)

# Evaluations on the device (issue 29): eval/model_runner.h over the CUDA table against
# the CPU's (losses, greedy tokens, the prefill), then `multiscreen eval --device=cuda`
# end to end against --device=cpu (ppl in fp32 and bf16, ttft, the refusals). Both skip,
# visibly, where no GPU is visible.
ms_add_gtest(eval_cuda_test cuda SOURCES eval/model_runner_cuda_test.cc LIBS ms_eval)
add_test(NAME eval_device_test COMMAND ${MS_TEST_PYTHON} ${CMAKE_SOURCE_DIR}/tests/eval/eval_device_test.py
         --multiscreen=$<TARGET_FILE:multiscreen> --source=${CMAKE_SOURCE_DIR})
set_tests_properties(eval_device_test PROPERTIES COST 35 LABELS "cuda;python" TIMEOUT 300
  ENVIRONMENT "MULTISCREEN_CONFIG_DIR=${CMAKE_SOURCE_DIR}/configs;OMP_NUM_THREADS=2"
  SKIP_REGULAR_EXPRESSION "\\*\\*\\* SKIPPED")
ms_gpu_tree_watch(eval_device_test)
# What follows (the emulator's own tests, the rest of tests/) runs without the recorder.
unset(MS_GTEST_FIXTURES)
unset(MS_GTEST_ENVIRONMENT)
unset(MS_GTEST_DEPENDS)
