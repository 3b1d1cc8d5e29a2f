"""Lines quoted verbatim by the seed reports (shared/seeds), copied character for character.

The generator writes these lines unchanged (apart from the launcher prefixes or the standard
Python traceback indentation a job module adds, as its README says) and ``build.py --check``
verifies that each one is present in the corpus. Never edit a string here by hand: it must stay
equal to the seed text.
"""

from __future__ import annotations

#: seed 000: printed by a rank whose iterator is exhausted
S000_DATALOADER_FINISHED = "[INFO|text_trainer.py:311] epoch:0 Dataloader finished with drop_last True"

#: seed 000: py-spy frame of the ranks that finished their data
S000_FRAME_BARRIER = "barrier (torch/distributed/distributed_c10d.py:4888)"

#: seed 000: caller of the barrier frame
S000_FRAME_DESTROY = "destroy_distributed (hyper_parallel/auto_models/trainer/base.py:776)"

#: seed 000: py-spy frame of the ranks still in step forward
S000_FRAME_PACKED = "find_packed_sequence_indices (transformers/masking_utils.py:788)"

#: seed 000: first line of the single-node command
S000_SINGLE_NODE_CMD = "torchrun --standalone --nproc_per_node=8 \\"

#: seed 003 problem 3: FSDP2 traceback frames (the seed lost the indentation)
P3_TRACE: tuple[str, ...] = (
    'File "/home/miniconda3/envs/nwulan/lib/python3.11/site-packages/torch/autograd/function.py", line 307, in apply',
    "    return user_fn(self, *args)",
    "~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~",
    'File "/home/miniconda3/envs/nwulan/lib/python3.11/site-packages/torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py", line 747, in backward',
    "    ctx.param_group.post_backward()",
    'File "/home/miniconda3/envs/nwulan/lib/python3.11/site-packages/torch_npu/distributed/fsdp_add_fsdp_patch.py", line 513, in wrapper',
    "    original_post_backward(self)",
    'File "/home/miniconda3/envs/nwulan/lib/python3.11/site-packages/torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py", line 442, in post_backward',
    "    ) = foreach_reduce(",
    'File "/home/miniconda3/envs/nwulan/lib/python3.11/site-packages/torch/utils/_contextlib.py", line 116, in decorate_context',
    "    return func(*args, **kwargs)",
    'File "/home/miniconda3/envs/nwulan/lib/python3.11/site-packages/torch_npu/distributed/fsdp_add_fsdp_patch.py", line 385, in _patched_foreach_reduce',
    "    dist.reduce_scatter_tensor(",
    'File "/home/miniconda3/envs/nwulan/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 81, in wrapper',
    "    return func(*args, **kwargs)",
    'File "/home/miniconda3/envs/nwulan/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 4286, in reduce_scatter_tensor',
    "    work = group._reduce_scatter_base(output, input, opts)",
    "~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~",
)

#: seed 003 problem 3: the RuntimeError line (one physical line, text doubled as in the seed)
P3_ERROR = "RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running collective: CollectiveFingerprint(SequenceNumber=12, OpType=_REDUCE_SCATTER_BASE, TensorShape=[56623104], TensorDtypes=Float Float, TensorDeviceTypes=TensorOptions(dtype=float (default), device=npu, layout=Strided (default), requires_grad=false (default), pinned_memory=false (default), memory_format=(nullptr)), but Rank 1 is running collective: CollectiveFingerprint(SequenceNumber=0OpType=GATHER).Collectives differ in the following aspects: Sequence number: 12vs 0 Op type: REDUCE SCATTER BASEvs GATHER Tensor Tensor shapes: 56623104vs Tensor Tensor dtypes: Float Floatsvs Tensor Tensor devices: TensorOptions(dtype=float (default), device=npu, layout=Strided (default), requires_grad=false (default), pinned_memory=false (default), memory_format=(nullptr))vs TensorOptions(dtype=float (default), device=npu, layout=Strided (default), requires_grad=false (default), pinned_memory=false (default), memory_format=(nullptr))vs Detected mismatch between collectives on ranks. Rank 0 is running collective: CollectiveFingerprint(SequenceNumber=12, OpType=_REDUCE_SCATTER_BASE, TensorShape=[56623104], TensorDtypes=Float Float, TensorDeviceTypes=TensorOptions(dtype=float (default), device=npu, layout=Strided (default), requires_grad=false (default), pinned_memory=false (default), memory_format=(nullptr))), but Rank 1 is running collective: CollectiveFingerprint(SequenceNumber=0OpType=GATHER).Collectives differ in the following aspects: Sequence number: 12vs 0 Op type: REDUCE SCATTER BASEvs GATHER Tensor Tensor shapes: 56623104vs Tensor Tensor dtypes: Float Floatsvs Tensor Tensor devices: TensorOptions(dtype=float (default), device=npu, layout=Strided (default), requires_grad=false (default), pinned_memory=false (default), memory_format=(nullptr))vs TensorOptions(dtype=float (default), device=npu, layout=Strided (default), requires_grad=false (default), pinned_memory=false (default), memory_format=(nullptr))vs Traceback (most recent call last):"

#: seed 003 problem 6: CANN runtime_assert backtrace of the watchdog SetDevice at exit
P6_ASSERT: tuple[str, ...] = (
    "runtime_assert:b############################ 19 ############################",
    "runtime_assert:#0 /usr/local/Ascend/cann-9.0.0/lib64/libruntime.so(+0x1e0c0) [0xffff672360c0]",
    "runtime_assert:#1 /usr/local/Ascend/cann-9.0.0/lib64/libruntime.so(rtProfSetProSwitch+0x3c) [0xffff6724e47c]",
    "runtime_assert:#2 /usr/local/Ascend/cann-9.0.0/lib64/libprofimpl.so(_ZN8Analysis4Dvvp14ProfilerCommon19ProfModuleReprotMgr17ProfSetProCommandER19MsprofCommandHandle+0x3b8) [0xffff2b3c3894]",
    "runtime_assert:#3 /usr/local/Ascend/cann-9.0.0/lib64/libprofimpl.so(_ZN8Analysis4Dvvp14ProfilerCommon19ProfModuleReprotMgr17ModuleReportStartEPKjmm+0x1a0) [0xffff2b3c3cd4]",
    "runtime_assert:#4 /usr/local/Ascend/cann-9.0.0/lib64/libprofimpl.so(_ZN10Msprofiler3Api10ProfAcIMgr15ProfStartCommonEPKjj+0x2d0) [0xffff2b3b35c8]",
    "runtime_assert:#5 /usr/local/Ascend/cann-9.0.0/lib64/libprofimpl.so(_ZN8Analysis4Dvvp14ProfilerCommon15ProfConfigStartEjPKvj+0xf8) [0xffff2b3c4c00]",
    "runtime_assert:#6 /usr/local/Ascend/cann-9.0.0/lib64/libprofimpl.so(_ZN8Analysis4Dvvp14ProfilerCommon19ProfNotifySetDeviceEjjb+0x1fc) [0xffff2b3c5d48]",
    "runtime_assert:#7 /usr/local/Ascend/cann-9.0.0/lib64/libprofapi.so(+0xeb4c) [0xffff698c4b4c]",
    "runtime_assert:#8 /usr/local/Ascend/cann-9.0.0/lib64/libruntime_v100.so(+0x34d710) [0xffff5bb85710]",
    "runtime_assert:#9 /usr/local/Ascend/cann-9.0.0/lib64/libruntime_v100.so(+0x6c594) [0xffff5b8a4594]",
    "runtime_assert:#10 /usr/local/Ascend/cann-9.0.0/lib64/libruntime_v100.so(+0xed060) [0xffff5b925060]",
    "runtime_assert:#11 /usr/local/Ascend/cann-9.0.0/lib64/libruntime.so(rtSetDevice+0x5c) [0xffff6725a09c]",
    "runtime_assert:#12 /usr/local/Ascend/cann-9.0.0/lib64/lacl_rt_impl.so(aclrtSetDeviceImpl+0x68) [0xffff621bb468]",
    "runtime_assert:#13 /mnt/sda1/anaconda3/envs/tools_test_py312/lib/python3.12/site-packages/torch_npu/lib/libtorch_npu.so(_ZN7c10_npu9SetDeviceEa+0x8c) [0xffff6c4c2fd0]",
    "runtime_assert:#14 /mnt/sda1/anaconda3/envs/tools_test_py312/lib/python3.12/site-packages/torch_npu/lib/libtorch_npu.so(_ZN8c10d_npu16ProcessGroupHCCL8Watchdog7runLoopEv+0x390) [0xffff6edec010]",
    "runtime_assert:#15 /mnt/sda1/anaconda3/envs/tools_test_py312/lib/python3.12/site-packages/torch_npu/lib/libtorch_npu.so(_ZN8c10d_npu16ProcessGroupHCCL8Watchdog3runEv+0x124) [0xffff6ededc34]",
    "runtime_assert:#16 /usr/local/Ascend/cann-9.0.0/lib64/libhcc1.so(+0x6f1bac) [0xffff6b79abac]",
    "runtime_assert:#17 /usr/lib64/libc.so.6(+0x7f1f0) [0xffff8de8e1f0]",
    "runtime_assert:#18 /usr/lib64/libc.so.6(+0xe571c) [0xffff8def471c]",
)

#: seed 003 problem 8: verl/FSDPTurbo traceback (the first line lost its two leading spaces)
P8_TRACE: tuple[str, ...] = (
    'File "/home/verl_fsdp_turbo/verl/workers/engine_workers.py", line 175, in reset',
    "    self.engine.initialize()",
    '  File "/home/verl_fsdp_turbo/verl/workers/engine/fsdp/transformer_impl.py", line 176, in initialize',
    "    self._build_model_optimizer()",
    '  File "/home/verl_fsdp_turbo/verl/workers/engine/mindspeed/transformer_impl.py", line 248, in _build_model_optimizer',
    "    module = FSDPTurbo(self.fsdp_turbo_config, module)",
    "             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
    '  File "/home/FSDPTurbo/fsdp_turbo/fsdp_turbo.py", line 22, in __init__',
    "    self.apply_ep_modules()",
    '  File "/home/FSDPTurbo/fsdp_turbo/fsdp_turbo.py", line 37, in apply_ep_modules',
    "    self.model = expert_parallelize_modules(self.model, self.parallel_state.get_ep_device_mesh(), self.config.distributed.ep_plan)",
    "                 ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
    '  File "/home/FSDPTurbo/fsdp_turbo/distributed/expert_parallel/expert_parallel.py", line 42, in expert_parallelize_modules',
    "    distribute_experts_module(module, ep_mesh)",
    '  File "/home/FSDPTurbo/fsdp_turbo/distributed/expert_parallel/expert_parallel.py", line 85, in distribute_experts_module',
    "    return distribute_module(module=module, device_mesh=ep_mesh, partition_fn=distribute_expert_weight,)",
    "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
    '  File "/usr/local/python3.11.10/lib/python3.11/site-packages/torch/distributed/tensor/_api.py", line 931, in distribute_module',
    "    partition_fn(name, submod, device_mesh)",
    '  File "/home/FSDPTurbo/fsdp_turbo/distributed/expert_parallel/expert_parallel.py", line 77, in distribute_expert_weight',
    "    dist_param = torch.nn.Parameter(distribute_tensor(param, ep_mesh, [Shard(0)]))",
    "                                    ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
    '  File "/usr/local/python3.11.10/lib/python3.11/site-packages/torch/distributed/tensor/_api.py", line 765, in distribute_tensor',
    "    local_tensor = placement._shard_tensor(",
    "                   ^^^^^^^^^^^^^^^^^^^^^^^^",
    '  File "/usr/local/python3.11.10/lib/python3.11/site-packages/torch/distributed/tensor/placement_types.py", line 183, in _shard_tensor',
    "    mesh_scatter(",
    '  File "/usr/local/python3.11.10/lib/python3.11/site-packages/torch/distributed/tensor/_collective_utils.py", line 108, in mesh_scatter',
    "    fut = scatter(",
    "          ^^^^^^^^",
    '  File "/usr/local/python3.11.10/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 81, in wrapper',
    "    return func(*args, **kwargs)",
    "           ^^^^^^^^^^^^^^^^^^^^^",
    '  File "/usr/local/python3.11.10/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 4369, in scatter',
    "    work = group.scatter(output_tensors, input_tensors, opts)",
    "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
)

#: seed 003 problem 8: RuntimeError, torch_npu ERR line and the EI0015 block
P8_ERROR: tuple[str, ...] = (
    "RuntimeError: create_config:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:130 HCCL function error: hcclCommInitRootInfoConfig(numRanks, &rootInfo, rank, config, &(comm->hcclComm_)), error code is 1",
    "[ERROR] 2026-05-22-12:08:27 (PID:575229, Device:0, RankID:0) ERR02200 DIST call hccl api failed.",
    "[PID: 575229] 2026-05-22-12:08:27.088.244 Ranktable_Detect_Failed(EI0015): Failed to collect cluster information of the communicator based on rootInfo detection. Reason: Within the timeout period, all ranks in the communication domain failed to connect to the server..",
    "        Solution: 1. Check whether all ranks in the communicator have delivered the communicator creation interface. 2. Check the connectivity between the host networks of all nodes and the server node. 3. Check whether the HCCL_SOCKET_IFNAME environment variable of all nodes is correctly configured. 4. Increase the timeout by configuring the HCCL_CONNECT_TIMEOUT environment variable.",
    "        TraceBack (most recent call last):",
    "        Failed to collect cluster information of the communicator based on rootInfo detection. Reason: rank num[8]is different with rank list size[1] in total topo rank info..",
)

#: seed 003 problem 9: tail of the step-2 train_inner line (the seed starts mid-line)
P9_TRAIN_TAIL = "clip=100, train_wall=25.5908, fetch_data=0.0002, cuda_gb_active=59, cuda_gb_allocated=59, cuda_gb_reserved=59.5, cuda_gb_free=2, wall=51.1474"

#: seed 003 problem 9: train_inner lines, checkpoint save, watchdog/ERR02008 lines, SIGTERM
P9_BLOCK: tuple[str, ...] = (
    "[2026-05-27 19:49:13,414][train_inner][INFO] - epoch 001: 3 / 127485 loss=12.388, ce_loss=12.3729, zloss=151.206, ppl=5304.07, wps=9931.1, ups=0.04, wpb=262144, bsz=64, num_updates=3, lr=6e-07, gnorm=12.293, clip=100, train_wall=26.3889, fetch_data=0.0007, cuda_gb_active=59, cuda_gb_allocated=59, cuda_gb_reserved=59.6, cuda_gb_free=2, wall=77.5745",
    "[2026-05-27 19:49:39,258][train_inner][INFO] - epoch 001: 4 / 127485 loss=12.3652, ce_loss=12.3501, zloss=151.223, ppl=5220.94, wps=10155.6, ups=0.04, wpb=262144, bsz=64, num_updates=4, lr=8e-07, gnorm=11.553, clip=100, train_wall=25.8055, fetch_data=0.0006, cuda_gb_active=59, cuda_gb_allocated=59, cuda_gb_reserved=59.3, cuda_gb_free=2, wall=103.452",
    "[2026-05-27 19:50:05,615][train_inner][INFO] - epoch 001: 5 / 127485 loss=12.3829, ce_loss=12.3678, zloss=151.221, ppl=5285.34, wps=9958.1, ups=0.04, wpb=262144, bsz=64, num_updates=5, lr=1e-06, gnorm=11.621, clip=100, train_wall=26.3174, fetch_data=0.0007, cuda_gb_active=59, cuda_gb_allocated=59, cuda_gb_reserved=59.5, cuda_gb_free=2, wall=129.807",
    "[2026-05-27 19:50:31,496][train_inner][INFO] - epoch 001: 6 / 127485 loss=12.3491, ce_loss=12.3339, zloss=151.228, ppl=5162.81, wps=10148.2, ups=0.04, wpb=262144, bsz=64, num_updates=6, lr=1.2e-06, gnorm=11.414, clip=100, train_wall=25.8242, fetch_data=0.0003, cuda_gb_active=59, cuda_gb_allocated=59, cuda_gb_reserved=59.5, cuda_gb_free=2, wall=155.668",
    "[2026-05-27 19:50:57,244][train_inner][INFO] - epoch 001: 7 / 127485 loss=12.339, ce_loss=12.3239, zloss=151.206, ppl=5127.1, wps=10193.1, ups=0.04, wpb=262144, bsz=64, num_updates=7, lr=1.4e-06, gnorm=11.467, clip=100, train_wall=25.7106, fetch_data=0.0003, cuda_gb_active=59, cuda_gb_allocated=59, cuda_gb_reserved=59.4, cuda_gb_free=2, wall=181.436",
    "[2026-05-27 19:51:23,155][train_inner][INFO] - epoch 001: 8 / 127485 loss=12.2318, ce_loss=12.2167, zloss=151.201, ppl=4759.79, wps=10129.5, ups=0.04, wpb=262144, bsz=64, num_updates=8, lr=1.6e-06, gnorm=12.426, clip=100, train_wall=25.872, fetch_data=0.0003, cuda_gb_active=59, cuda_gb_allocated=59, cuda_gb_reserved=59.5, cuda_gb_free=2, wall=207.348",
    "[2026-05-27 19:51:48,686][train_inner][INFO] - epoch 001: 9 / 127485 loss=12.1868, ce_loss=12.1716, zloss=151.195, ppl=4613.47, wps=10279.7, ups=0.04, wpb=262144, bsz=64, num_updates=9, lr=1.8e-06, gnorm=11.923, clip=100, train_wall=25.4932, fetch_data=0.0007, cuda_gb_active=59, cuda_gb_allocated=59, cuda_gb_reserved=59.3, cuda_gb_free=2, wall=232.881",
    "[2026-05-27 19:52:14,626][train_inner][INFO] - epoch 001: 10 / 127485 loss=12.1536, ce_loss=12.1385, zloss=151.195, ppl=4508.76, wps=10142.3, ups=0.04, wpb=262144, bsz=64, num_updates=10, lr=2e-06, gnorm=12.063, clip=100, train_wall=25.8393, fetch_data=0.0003, cuda_gb_active=59, cuda_gb_allocated=59, cuda_gb_reserved=59.5, cuda_gb_free=2, wall=258.758",
    "[2026-05-27 19:52:14,630][hulk.train][INFO] - Stopping training due to num_updates: 10 >= max_update: 10",
    "[2026-05-27 19:52:14,630][hulk.train][INFO] - before do empty cache",
    "[2026-05-27 19:52:14,631][hulk.train][INFO] - cuda_gb_active=52.79613161087036, cuda_gb_reserved=59.078125",
    "[2026-05-27 19:52:15,057][hulk.train][INFO] - after do empty cache",
    "[2026-05-27 19:52:15,082][hulk.train][INFO] - cuda_gb_active=52.79613161087036, cuda_gb_reserved=59.078125",
    "[2026-05-27 19:52:34,306][hulk.utils.checkpoint_utils][INFO] - Preparing to save checkpoint for epoch 1 @ part_idx 0 @ 10 updates",
    "[2026-05-27 19:52:34,307][hulk.trainer][INFO] - Saving checkpoint to /train28/bitbrain/permanent/gblu2/version_release/v0.8.0-rc1/7b/output/test-0527-cann8.2.rc1-torch2.4-testenv/checkpoints/checkpoint-last/shard-0-0.pt",
    "[2026-05-27 19:52:34,331][hulk.utils.state_dict][INFO] - replaced model state by fp32 param replicas!",
    "[2026-05-27 19:52:34,354][hulk.utils.checkpoint_utils][INFO] - torch_persistent_save filenames:/train28/bitbrain/permanent/gblu2/version_release/v0.8.0-rc1/7b/output/test-0527-cann8.2.rc1-torch2.4-testenv/checkpoints/checkpoint-last/shard-0-0.pt, mindio_enable_acp=False",
    "[default5]:[E527 19:52:41.491119810 compiler_depend.ts:1047] [Rank 0] HCCL watchdog thread terminated with exception: Open shared directory failed. Please check whether input path is valid.",
    "[default5]:[ERROR] 2026-05-27-19:52:41 (PID:227, Device:5, RankID:5) ERR02008",
    "[default2]:[E527 19:52:42.485388340 compiler_depend.ts:1047] [Rank 0] HCCL watchdog thread terminated with exception: Open shared directory failed. Please check whether input path is valid.",
    "[default2]:[ERROR] 2026-05-27-19:52:42 (PID:224, Device:2, RankID:2) ERR02008",
    "[default7]:[E527 19:52:42.488107818 compiler_depend.ts:1047] [Rank 0] HCCL watchdog thread terminated with exception: Open shared directory failed. Please check whether input path is valid.",
    "[default7]:[ERROR] 2026-05-27-19:52:42 (PID:229, Device:7, RankID:7) ERR02008",
    "[default4]:[E527 19:52:42.488646713 compiler_depend.ts:1047] [Rank 0] HCCL watchdog thread terminated with exception: Open shared directory failed. Please check whether input path is valid.",
    "[default4]:[ERROR] 2026-05-27-19:52:42 (PID:226, Device:4, RankID:4) ERR02008",
    "[default1]:[E527 19:52:42.509011422 compiler_depend.ts:1047] [Rank 0] HCCL watchdog thread terminated with exception: Open shared directory failed. Please check whether input path is valid.",
    "[default1]:[ERROR] 2026-05-27-19:52:42 (PID:223, Device:1, RankID:1) ERR02008",
    "[default3]:[E527 19:52:42.484977386 compiler_depend.ts:1047] [Rank 0] HCCL watchdog thread terminated with exception: Open shared directory failed. Please check whether input path is valid.",
    "[default3]:[ERROR] 2026-05-27-19:52:42 (PID:225, Device:3, RankID:3) ERR02008",
    "[default6]:[E527 19:52:42.486642293 compiler_depend.ts:1047] [Rank 0] HCCL watchdog thread terminated with exception: Open shared directory failed. Please check whether input path is valid.",
    "[default6]:[ERROR] 2026-05-27-19:52:42 (PID:228, Device:6, RankID:6) ERR02008",
    "[default6]:[E527 19:52:42.519269937 compiler_depend.ts:1047] [Rank 6] HCCL watchdog thread terminated with exception: Open shared directory failed. Please check whether input path is valid.",
    "[default6]:[ERROR] 2026-05-27-19:52:42 (PID:228, Device:6, RankID:6) ERR02008",
    "[default3]:[E527 19:52:42.666368115 compiler_depend.ts:1047] [Rank 3] HCCL watchdog thread terminated with exception: Open shared directory failed. Please check whether input path is valid.",
    "[default3]:[ERROR] 2026-05-27-19:52:42 (PID:225, Device:3, RankID:3) ERR02008",
    "[default7]:[E527 19:52:42.768249249 compiler_depend.ts:1047] [Rank 7] HCCL watchdog thread terminated with exception: Open shared directory failed. Please check whether input path is valid.",
    "[default7]:[ERROR] 2026-05-27-19:52:42 (PID:229, Device:7, RankID:7) ERR02008",
    "[default2]:[E527 19:52:42.934083889 compiler_depend.ts:1047] [Rank 2] HCCL watchdog thread terminated with exception: Open shared directory failed. Please check whether input path is valid.",
    "[default2]:[ERROR] 2026-05-27-19:52:42 (PID:224, Device:2, RankID:2) ERR02008",
    "[default4]:[E527 19:52:42.234955602 compiler_depend.ts:1047] [Rank 4] HCCL watchdog thread terminated with exception: Open shared directory failed. Please check whether input path is valid.",
    "[default4]:[ERROR] 2026-05-27-19:52:42 (PID:226, Device:4, RankID:4) ERR02008",
    "[default1]:[E527 19:52:42.364461090 compiler_depend.ts:1047] [Rank 1] HCCL watchdog thread terminated with exception: Open shared directory failed. Please check whether input path is valid.",
    "[default1]:[ERROR] 2026-05-27-19:52:42 (PID:223, Device:1, RankID:1) ERR02008",
    "W0527 19:52:50.852000 281467089262240 torch/distributed/elastic/multiprocessing/api.py:858] Sending process 222 closing signal SIGTERM",
    "[default0]:Exception in thread Thread-1(default0)::",
)

#: seed 003 problem 10: DTensor traceback (the seed lost indentation and added blank lines)
P10_TRACE: tuple[str, ...] = (
    'File "/usr/local/python3.11.4/lib/python3.11/site-packages/torch/_compile.py", line 53, in inner',
    "return disable_fn(*args, **kwargs)",
    'File "/usr/local/python3.11.4/lib/python3.11/site-packages/torch/_dynamo/eval_frame.py", line 1044, in _fn',
    "return fn(*args, **kwargs)",
    'File "/usr/local/python3.11.4/lib/python3.11/site-packages/torch/distributed/tensor/_api.py", line 349, in __torch_dispatch__',
    "return DTensor._op_dispatcher.dispatch(",
    'File "/usr/local/python3.11.4/lib/python3.11/site-packages/torch/distributed/tensor/_dispatch.py", line 149, in dispatch',
    "return self._custom_op_handlers[op_call](op_call, args, kwargs) # type: ignore[operator]",
    'File "/usr/local/python3.11.4/lib/python3.11/site-packages/torch_npu/distributed/tensor/_attention.py", line 638, in _npu_fusion_attention_handler',
    "DTensor._op_dispatcher.sharding_propagator.propagate(op_info)",
    'File "/usr/local/python3.11.4/lib/python3.11/site-packages/torch/distributed/tensor/_sharding_prop.py", line 327, in propagate',
    "OutputSharding, self.propagate_op_sharding(op_info.schema)",
    'File "/usr/local/python3.11.4/lib/python3.11/site-packages/torch/distributed/tensor/_sharding_prop.py", line 46, in __call__',
    "return self.cache(*args, **kwargs)",
    'File "/usr/local/python3.11.4/lib/python3.11/site-packages/torch/distributed/tensor/_sharding_prop.py", line 346, in propagate_op_sharding_non_cached',
    "op_strategy = self.op_strategy_funcs[op_schema.op](strategy_schema)",
    'File "/usr/local/python3.11.4/lib/python3.11/site-packages/torch/distributed/tensor/experimental/_register_sharding.py", line 98, in custom_strategy',
    "return expand_to_full_mesh_op_strategy(",
    'File "/usr/local/python3.11.4/lib/python3.11/site-packages/torch/distributed/tensor/_ops/utils.py", line 332, in expand_to_full_mesh_op_strategy',
    "assert len(input_specs) == len(input_args_strategy)",
    "AssertionError",
)

#: seed 004: node 0 launch command
S004_CMD_NODE0 = 'torchrun --nnodes=2 --node_rank=0 --nproc_per_node=2 --master_addr=2605:340:cd51:4b00:9b86:912c:6586:d4d0 --master_port=10217 ./swift_pt.py --model ./workdir/base_model --model_type qwen3 --dataset ./workdir/dataset/shuffled_dataset.jsonl --output_dir ./workdir/swift_output --dataloader_num_workers 10 --dataset_num_proc 10 --attn_impl flash_attn --max_steps 400 --max_length 32768 --per_device_train_batch_size 1 --per_device_eval_batch_size 1 --sequence_parallel_size 1 --learning_rate 1e-5 --warmup_ratio 0.05 --weight_decay 1e-4 --max_grad_norm 1.0 --gradient_accumulation_steps 8 --save_strategy steps --save_steps 400 --save_total_limit 1 --train_type full --deepspeed zero3_offload --eval_strategy steps --eval_steps 10 --split_dataset_ratio 0.05 --lr_scheduler_type warmup_stable_decay --lr_scheduler_kwargs "{ "num_decay_steps": 120, "num_stable_steps": 260}" --packing True --dataset_shuffle True --train_dataloader_shuffle True --truncation_strategy right --dataloader_num_workers 4 --model_author swift --model_name swift-robot --log_level detail --logging_steps 1 --report_to wandb'

#: seed 004: node 1 launch command
S004_CMD_NODE1 = 'torchrun --nnodes=2 --node_rank=1 --nproc_per_node=2 --master_addr=2605:340:cd51:4b00:9b86:912c:6586:d4d0 --master_port=10217 ./swift_pt.py --model ./workdir/base_model --model_type qwen3 --dataset ./workdir/dataset/shuffled_dataset.jsonl --output_dir ./workdir/swift_output --dataloader_num_workers 10 --dataset_num_proc 10 --attn_impl flash_attn --max_steps 400 --max_length 32768 --per_device_train_batch_size 1 --per_device_eval_batch_size 1 --sequence_parallel_size 1 --learning_rate 1e-5 --warmup_ratio 0.05 --weight_decay 1e-4 --max_grad_norm 1.0 --gradient_accumulation_steps 8 --save_strategy steps --save_steps 400 --save_total_limit 1 --train_type full --deepspeed zero3_offload --eval_strategy steps --eval_steps 10 --split_dataset_ratio 0.05 --lr_scheduler_type warmup_stable_decay --lr_scheduler_kwargs "{ "num_decay_steps": 120, "num_stable_steps": 260}" --packing True --dataset_shuffle True --train_dataloader_shuffle True --truncation_strategy right --dataloader_num_workers 4 --model_author swift --model_name swift-robot --log_level detail --logging_steps 1 --report_to wandb'
