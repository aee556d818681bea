// A thin, error-checked layer over the HDF5 C API: write a file atomically
// (into "<path>.tmp", flushed, then renamed), read datasets with their shapes
// checked. Every error names the file and the dataset or attribute, and a
// failed write its cause (strerror of the errno HDF5's file driver recorded).
// Files are opened with best-effort locking: flock where the file system
// supports it, none where it refuses (Lustre, NFS nolock).
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace multiscreen {

// The error for a failed write of `path` ("<path>: <what>: <strerror(err)>"):
// RESOURCE_EXHAUSTED, with the bytes still free in path's directory, when the
// file system, a quota or a file-size limit is full (ENOSPC, EDQUOT, EFBIG);
// DATA_LOSS otherwise, and without a cause when err is 0 (none known).
absl::Status WriteError(const std::string& path, const std::string& what, int err);

// Bytes available to this user on the file system holding `dir` (statvfs), or −1.
int64_t FreeBytes(const std::string& dir);

// Writes datasets and root attributes; nothing is visible at `path` until
// Commit() succeeds. Destroying an uncommitted writer removes the temporary.
class H5Writer {
 public:
  static absl::StatusOr<std::unique_ptr<H5Writer>> Create(const std::string& path);
  ~H5Writer();

  // A dataset `name` ("a/b/c", groups created) of `shape` ([] = scalar), fp32 or fp64.
  absl::Status Write(const std::string& name, const std::vector<int64_t>& shape, const float* data);
  absl::Status Write(const std::string& name, const std::vector<int64_t>& shape, const double* data);
  // A dataset holding rows [offset[0], offset[0] + shape[0]) of a tensor of
  // `global_shape`: attributes `global_shape` and `offset` say so.
  absl::Status WriteSlice(const std::string& name, const std::vector<int64_t>& shape,
                          const std::vector<int64_t>& global_shape, const std::vector<int64_t>& offset,
                          const float* data);
  // A 1-D dataset of `count` elements holding a run of a tensor of
  // `global_shape` that starts at global row-major index flat_offset:
  // attributes `global_shape` and `flat_offset` say so.
  absl::Status WritePiece(const std::string& name, int64_t count, const std::vector<int64_t>& global_shape,
                          int64_t flat_offset, const float* data);
  // A 2-step dataset for streamed writers (issue 20): CreateRows makes fp32
  // dataset `name` of `shape`, chunked by `chunk_rows` rows of dimension 0
  // (contiguous when the shape is a scalar or empty), with the fill value 0
  // declared (user-defined), so that a chunk never written reads as zeros and
  // costs no disk; WriteRows then writes rows [row_begin, row_begin + rows).
  // Readers accept unwritten chunks only with that declared fill value
  // (CheckDatasetHolds' allow_zero_fill), and only where a checksum covers them.
  absl::Status CreateRows(const std::string& name, const std::vector<int64_t>& shape, int64_t chunk_rows);
  absl::Status WriteRows(const std::string& name, int64_t row_begin, int64_t rows, const float* data);
  // Int64 array attributes of dataset `name` (e.g. global_shape, offset, flat_offset).
  absl::Status WriteDatasetAttributes(const std::string& name,
                                      const std::vector<std::pair<const char*, std::vector<int64_t>>>& attributes);
  absl::Status WriteAttribute(const std::string& name, int64_t value);
  absl::Status WriteAttribute(const std::string& name, double value);
  absl::Status WriteAttribute(const std::string& name, const std::string& value);
  // Closes, fsyncs and renames into place. `cancelled` (a stop signal, trainer/stop_signal.h)
  // is polled once more before the rename: true removes the temporary and returns
  // CANCELLED, so that a file interrupted while it was flushed replaces nothing.
  absl::Status Commit(const std::function<bool()>& cancelled = nullptr);

 private:
  H5Writer(std::string path, int64_t file);
  // `type` is an HDF5 native type id (hid_t).
  absl::Status WriteScalarAttribute(const std::string& name, int64_t type, const void* value);
  std::string path_, tmp_;
  int64_t file_ = -1;
};

// Reads datasets and root attributes of an existing file.
class H5Reader {
 public:
  static absl::StatusOr<std::unique_ptr<H5Reader>> Open(const std::string& path);
  ~H5Reader();

  bool Has(const std::string& name) const;
  // Reads dataset `name` as fp32 (converted by HDF5 from its stored type);
  // an error when it is missing or its shape is not `shape`.
  absl::StatusOr<std::vector<float>> ReadFloat(const std::string& name, const std::vector<int64_t>& shape) const;
  absl::StatusOr<std::vector<double>> ReadDouble(const std::string& name, const std::vector<int64_t>& shape) const;
  // The shape of dataset `name`.
  absl::StatusOr<std::vector<int64_t>> Shape(const std::string& name) const;
  // What a dataset's header says, read without touching its data: for checking
  // it against what it must hold before anything is allocated from its shape.
  struct DatasetInfo {
    std::vector<int64_t> shape;  // [] for a scalar
    bool is_float = false;       // HDF5 class H5T_FLOAT (any width; read converted to fp32)
    int64_t type_bytes = 0;      // bytes per stored element
    int64_t elements = 0;        // product of shape (1 for a scalar), saturated at INT64_MAX
    int64_t storage_bytes = 0;   // bytes allocated in the file (H5Dget_storage_size)
    int filters = 0;             // compression and other filters in its pipeline
    bool zero_fill = false;      // a user-defined fill value of 0.0 (H5Writer::CreateRows): unwritten chunks read 0
  };
  // Errors (naming file and dataset): missing, not a dataset, a null or
  // non-simple dataspace.
  absl::StatusOr<DatasetInfo> Describe(const std::string& name) const;
  // An int64 array attribute of dataset `dataset` (e.g. global_shape, offset).
  absl::StatusOr<std::vector<int64_t>> ReadDatasetAttribute(const std::string& dataset, const std::string& attr) const;
  // Rows [row_begin, row_begin + rows) of dataset `name` (dimension 0), read
  // through an HDF5 hyperslab into `out` (rows × the product of the other dims).
  absl::Status ReadRows(const std::string& name, int64_t row_begin, int64_t rows, float* out) const;
  // All dataset names (full paths, no leading '/').
  std::vector<std::string> DatasetNames() const;
  // The names of the root group's attributes, in name order.
  std::vector<std::string> RootAttributeNames() const;
  // Root attributes. Each must be a scalar (or a one-element array) of the
  // right class: an integer attribute an HDF5 integer, a double one an integer
  // or float; NotFound when missing, InvalidArgument (naming the attribute and
  // what it is) otherwise.
  absl::StatusOr<int64_t> ReadIntAttribute(const std::string& name) const;
  absl::StatusOr<double> ReadDoubleAttribute(const std::string& name) const;
  absl::StatusOr<std::string> ReadStringAttribute(const std::string& name) const;
  const std::string& path() const { return path_; }

 private:
  H5Reader(std::string path, int64_t file) : path_(std::move(path)), file_(file) {}
  // The open attribute id (hid_t), to be closed by the caller; see ReadIntAttribute.
  absl::StatusOr<int64_t> OpenScalarAttribute(const std::string& name, std::initializer_list<int> classes,
                                              const char* what) const;
  template <typename T>
  absl::StatusOr<std::vector<T>> Read(const std::string& name, const std::vector<int64_t>& shape) const;
  std::string path_;
  int64_t file_ = -1;
};

}  // namespace multiscreen
