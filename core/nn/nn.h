// Umbrella header: every torch.nn layer, the init functions and deep copies.
#pragma once

#include "core/module.h"
#include "core/nn/activation.h"
#include "core/nn/batch_norm.h"
#include "core/nn/clip_grad.h"
#include "core/nn/cloneable.h"
#include "core/nn/container.h"
#include "core/nn/dropout.h"
#include "core/nn/embedding.h"
#include "core/nn/init.h"
#include "core/nn/layer_norm.h"
#include "core/nn/linear.h"
#include "core/nn/multihead_attention.h"
#include "core/nn/transformer.h"
