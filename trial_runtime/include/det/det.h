// Umbrella header of the det-cpp Trial SDK.
#ifndef DET_DET_H_
#define DET_DET_H_

#include "det/batch.h"
#include "det/context.h"
#include "det/data_loader.h"
#include "det/metrics.h"
#include "det/trial.h"
#include "det/version.h"

#endif  // DET_DET_H_
