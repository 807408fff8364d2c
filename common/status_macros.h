// Status helpers missing from Abseil 20220623.
#ifndef DET_COMMON_STATUS_MACROS_H_
#define DET_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define DET_STATUS_CONCAT_INNER_(a, b) a##b
#define DET_STATUS_CONCAT_(a, b) DET_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status); returns it from the enclosing function
// when it is not OK.
#define DET_RETURN_IF_ERROR(expr)                 \
  do {                                            \
    ::absl::Status det_status_ = (expr);          \
    if (!det_status_.ok()) return det_status_;    \
  } while (0)

// `DET_ASSIGN_OR_RETURN(auto x, Foo());` evaluates Foo() (an absl::StatusOr),
// returns its status when it is not OK, and otherwise moves its value into x.
#define DET_ASSIGN_OR_RETURN(lhs, expr) \
  DET_ASSIGN_OR_RETURN_IMPL_(DET_STATUS_CONCAT_(det_statusor_, __LINE__), lhs, expr)
#define DET_ASSIGN_OR_RETURN_IMPL_(var, lhs, expr) \
  auto var = (expr);                               \
  if (!var.ok()) return std::move(var).status();   \
  lhs = std::move(var).value()

#endif  // DET_COMMON_STATUS_MACROS_H_
