// Error propagation helpers over absl::Status (the house style: library code
// returns Status/StatusOr; only main() prints and exits).
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define MS_CONCAT_INNER_(a, b) a##b
#define MS_CONCAT_(a, b) MS_CONCAT_INNER_(a, b)

// Returns from the enclosing function when `expr` (an absl::Status) is not OK.
#define MS_RETURN_IF_ERROR(expr)                 \
  do {                                           \
    ::absl::Status ms_status_ = (expr);          \
    if (!ms_status_.ok()) return ms_status_;     \
  } while (0)

// `MS_ASSIGN_OR_RETURN(auto x, F())`: unwraps a StatusOr or returns its error.
#define MS_ASSIGN_OR_RETURN(lhs, expr) \
  MS_ASSIGN_OR_RETURN_IMPL_(MS_CONCAT_(ms_statusor_, __LINE__), lhs, expr)
#define MS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
