// Umbrella header: the optimizers.
#pragma once

#include "core/optim/adam.h"
#include "core/optim/optimizer.h"
#include "core/optim/sgd.h"
