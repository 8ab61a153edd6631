// The umbrella header of the installed library, for `#include <fsdp/fsdp.h>`: tensors, modules
// and optimizers (core), process groups and the launch of a job (comm), the auto-wrap policies
// (in code, or as --policy text), activation checkpointing, and FullyShardedDataParallel with its
// state dicts, checkpoints, gradient clipping and summon_full_params. Each header is also
// installed on its own (<fsdp/core/tensor.h>, <fsdp/comm/process_group.h>, ...; README "The
// public API").
#pragma once

#include "comm/launch.h"
#include "comm/process_group.h"
#include "comm/registry.h"
#include "comm/threads/run_ranks.h"
#include "core/module.h"
#include "core/nn/nn.h"
#include "core/ops.h"
#include "core/optim/optim.h"
#include "core/tensor.h"
#include "fsdp/checkpoint.h"
#include "fsdp/checkpoint_full.h"
#include "fsdp/clip_grad_norm.h"
#include "fsdp/fully_sharded_data_parallel.h"
#include "fsdp/load_sharded.h"
#include "fsdp/optim_state_dict.h"
#include "fsdp/state_dict.h"
#include "fsdp/summon_full_params.h"
#include "ops/checkpoint_wrapper.h"
#include "policies/always_wrap.h"
#include "policies/auto_wrap.h"
#include "policies/custom_policy.h"
#include "policies/enable_wrap.h"
#include "policies/lambda_policy.h"
#include "policies/module_wrap_policy.h"
#include "policies/or_policy.h"
#include "policies/policy_build.h"
#include "policies/size_based.h"
#include "policies/transformer_policy.h"
