#include "checkpoint/h5_file.h"

#include <fcntl.h>
#include <hdf5.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/input_file.h"
#include "common/status.h"

namespace multiscreen {
namespace {

// HDF5 1.10.7 and 1.12.1 added H5Pset_file_locking.
#if (H5_VERS_MAJOR == 1 && H5_VERS_MINOR == 10 && H5_VERS_RELEASE >= 7) || H5_VERSION_GE(1, 12, 1)
#define MS_HDF5_HAS_FILE_LOCKING_PROPERTY 1
#endif

// Silences HDF5's own error stack printing (we report errors ourselves) and,
// where HDF5 has no file-locking property, asks for best-effort locking through
// the environment before the library first reads it (a user's setting wins).
// HDF5's exit-time clean-up is off: after an H5Fclose that failed to flush (a
// full disk) 1.10 keeps a half-freed file id, and closing it again at exit
// crashed the process (SIGSEGV in H5F__close_cb) after its error was reported.
// Every file we open is closed by its H5Writer/H5Reader.
void QuietHdf5() {
  static const bool once = [] {
#ifndef MS_HDF5_HAS_FILE_LOCKING_PROPERTY
    setenv("HDF5_USE_FILE_LOCKING", "BEST_EFFORT", /*overwrite=*/0);
#endif
    H5dont_atexit();
    return H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr) >= 0;
  }();
  (void)once;
}

// File access properties for every file we create or open: HDF5 1.10 locks
// files with flock(), which parallel file systems mounted without it (Lustre
// without -o flock, NFS with nolock) refuse with ENOSYS ("unable to lock
// file"). Best effort: lock where the file system can, carry on where it
// cannot. HDF5_USE_FILE_LOCKING in the environment still overrides this.
hid_t FileAccess() {
  QuietHdf5();
  static const hid_t fapl = [] {
    const hid_t p = H5Pcreate(H5P_FILE_ACCESS);
#ifdef MS_HDF5_HAS_FILE_LOCKING_PROPERTY
    H5Pset_file_locking(p, /*use_file_locking=*/true, /*ignore_when_disabled=*/true);
#endif
    return p;
  }();
  return fapl;
}

// The errno behind the HDF5 call that just failed: its file driver records
// "errno = N" in the error stack. 0 when the stack names none (an HDF5-level
// error). Call it before any other HDF5 call, which would clear the stack.
int FailedCallErrno() {
  int found = 0;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_DOWNWARD,
      [](unsigned, const H5E_error2_t* e, void* data) -> herr_t {
        const char* at = e->desc != nullptr ? std::strstr(e->desc, "errno = ") : nullptr;
        if (at != nullptr && *static_cast<int*>(data) == 0) *static_cast<int*>(data) = std::atoi(at + 8);
        return 0;
      },
      &found);
  return found;
}

// ": <strerror(err)>", or "" when err is 0 (no cause known).
std::string Cause(int err) { return err != 0 ? absl::StrCat(": ", std::strerror(err)) : ""; }

// WriteError for the HDF5 call on `path` that just failed, with the cause it recorded.
absl::Status H5WriteError(const std::string& path, const std::string& what) {
  return WriteError(path, what, FailedCallErrno());
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// "an integer", "a string", ... for an HDF5 type class (H5T_class_t).
std::string ClassName(int cls) {
  switch (cls) {
    case H5T_INTEGER: return "an integer";
    case H5T_FLOAT: return "a float";
    case H5T_STRING: return "a string";
    case H5T_COMPOUND: return "a compound";
    case H5T_ENUM: return "an enum";
    case H5T_ARRAY: return "an array type";
    default: return absl::StrCat("of HDF5 type class ", cls);
  }
}

#define MS_H5_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()
#define MS_H5_CAT2_(a, b) a##b
#define MS_H5_CAT_(a, b) MS_H5_CAT2_(a, b)
#define MS_H5_ASSIGN_OR_RETURN(lhs, expr) MS_H5_ASSIGN_OR_RETURN_IMPL_(MS_H5_CAT_(ms_h5_, __LINE__), lhs, expr)

template <typename T>
hid_t NativeType();
template <>
hid_t NativeType<float>() { return H5T_NATIVE_FLOAT; }
template <>
hid_t NativeType<double>() { return H5T_NATIVE_DOUBLE; }

template <typename T>
absl::Status WriteDataset(hid_t file, const std::string& path, const std::string& name,
                          const std::vector<int64_t>& shape, const T* data) {
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  const hid_t space = shape.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(int(dims.size()), dims.data(), nullptr);
  const hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1);
  const hid_t set = H5Dcreate2(file, name.c_str(), NativeType<T>(), space, lcpl, H5P_DEFAULT, H5P_DEFAULT);
  herr_t err = set < 0 ? -1 : H5Dwrite(set, NativeType<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
  const absl::Status status =
      err < 0 ? H5WriteError(path, absl::StrCat("cannot write dataset ", name)) : absl::OkStatus();
  if (set >= 0) H5Dclose(set);
  H5Pclose(lcpl);
  H5Sclose(space);
  return status;
}

}  // namespace

absl::Status WriteError(const std::string& path, const std::string& what, int err) {
  std::string text = absl::StrCat(path, ": ", what, Cause(err));
  if (err != ENOSPC && err != EDQUOT && err != EFBIG) return absl::DataLossError(text);
  // The file system (or a quota, or a file-size limit) is full: say how full.
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  if (const int64_t free = FreeBytes(dir); free >= 0) absl::StrAppend(&text, " (", free, " bytes free in ", dir, ")");
  return absl::ResourceExhaustedError(text);
}

int64_t FreeBytes(const std::string& dir) {
  struct statvfs fs;
  if (::statvfs(dir.c_str(), &fs) != 0) return -1;
  return int64_t(fs.f_bavail) * int64_t(fs.f_frsize);
}

H5Writer::H5Writer(std::string path, int64_t file) : path_(std::move(path)), tmp_(path_ + ".tmp"), file_(file) {}

absl::StatusOr<std::unique_ptr<H5Writer>> H5Writer::Create(const std::string& path) {
  QuietHdf5();
  // The rename in Commit would replace a FIFO or device node at `path` (/dev/null).
  MS_RETURN_IF_ERROR(CheckReplaceableOutput("", path));
  const std::string tmp = path + ".tmp";
  const hid_t file = H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, FileAccess());
  if (file < 0) {
    // A full disk can show here already (HDF5 writes the superblock on create): say so
    // as a write failure does, with the free bytes; anything else is most likely access.
    // Named by the path the user gave (the .tmp beside it is ours): a missing directory
    // names that directory.
    const int err = FailedCallErrno();
    if (err == ENOSPC || err == EDQUOT || err == EFBIG) return WriteError(path, "cannot create HDF5 file", err);
    std::string dir = std::filesystem::path(path).parent_path().string();
    std::error_code ec;
    if (err == ENOENT && !dir.empty() && !std::filesystem::exists(dir, ec)) {
      return absl::NotFoundError(absl::StrCat(path, ": cannot create HDF5 file: no directory ", dir));
    }
    return absl::PermissionDeniedError(absl::StrCat(path, ": cannot create HDF5 file", Cause(err)));
  }
  return std::unique_ptr<H5Writer>(new H5Writer(path, file));
}

H5Writer::~H5Writer() {
  if (file_ >= 0) {
    H5Fclose(file_);
    std::remove(tmp_.c_str());
  }
}

absl::Status H5Writer::Write(const std::string& name, const std::vector<int64_t>& shape, const float* data) {
  return WriteDataset(file_, tmp_, name, shape, data);
}
absl::Status H5Writer::Write(const std::string& name, const std::vector<int64_t>& shape, const double* data) {
  return WriteDataset(file_, tmp_, name, shape, data);
}

absl::Status H5Writer::CreateRows(const std::string& name, const std::vector<int64_t>& shape, int64_t chunk_rows) {
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  int64_t elements = 1;
  for (const int64_t d : shape) elements *= d;
  const hid_t space = shape.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(int(dims.size()), dims.data(), nullptr);
  const hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  const float zero = 0.0f;
  H5Pset_fill_value(dcpl, H5T_NATIVE_FLOAT, &zero);
  if (!shape.empty() && elements > 0) {
    std::vector<hsize_t> chunk = dims;
    chunk[0] = hsize_t(std::max<int64_t>(1, std::min<int64_t>(chunk_rows, shape[0])));
    H5Pset_chunk(dcpl, int(chunk.size()), chunk.data());
    H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_INCR);
    H5Pset_fill_time(dcpl, H5D_FILL_TIME_IFSET);
  }
  const hid_t set = H5Dcreate2(file_, name.c_str(), H5T_NATIVE_FLOAT, space, lcpl, dcpl, H5P_DEFAULT);
  const absl::Status status =
      set < 0 ? H5WriteError(tmp_, absl::StrCat("cannot create dataset ", name)) : absl::OkStatus();
  if (set >= 0) H5Dclose(set);
  H5Pclose(dcpl);
  H5Pclose(lcpl);
  H5Sclose(space);
  return status;
}

absl::Status H5Writer::WriteRows(const std::string& name, int64_t row_begin, int64_t rows, const float* data) {
  const hid_t set = H5Dopen2(file_, name.c_str(), H5P_DEFAULT);
  if (set < 0) return absl::InternalError(absl::StrCat(tmp_, ": cannot reopen dataset ", name));
  const hid_t file_space = H5Dget_space(set);
  const int rank = H5Sget_simple_extent_ndims(file_space);
  herr_t err;
  if (rank <= 0) {  // a scalar
    err = H5Dwrite(set, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
  } else {
    std::vector<hsize_t> start(rank, 0), count(rank);
    H5Sget_simple_extent_dims(file_space, count.data(), nullptr);
    start[0] = hsize_t(row_begin);
    count[0] = hsize_t(rows);
    H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr);
    const hid_t mem_space = H5Screate_simple(rank, count.data(), nullptr);
    err = H5Dwrite(set, H5T_NATIVE_FLOAT, mem_space, file_space, H5P_DEFAULT, data);
    H5Sclose(mem_space);
  }
  const absl::Status status =
      err < 0 ? H5WriteError(tmp_, absl::StrCat("cannot write rows of dataset ", name)) : absl::OkStatus();
  H5Sclose(file_space);
  H5Dclose(set);
  return status;
}

absl::Status H5Writer::WriteDatasetAttributes(
    const std::string& name, const std::vector<std::pair<const char*, std::vector<int64_t>>>& attributes) {
  const hid_t set = H5Dopen2(file_, name.c_str(), H5P_DEFAULT);
  if (set < 0) return absl::InternalError(absl::StrCat(tmp_, ": cannot reopen dataset ", name));
  herr_t err = 0;
  int cause = 0;
  for (const auto& [attr_name, values] : attributes) {
    const hsize_t n = values.size();
    const hid_t space = n == 0 ? H5Screate(H5S_NULL) : H5Screate_simple(1, &n, nullptr);
    const hid_t attr = H5Acreate2(set, attr_name, H5T_NATIVE_INT64, space, H5P_DEFAULT, H5P_DEFAULT);
    if (attr < 0 || (n > 0 && H5Awrite(attr, H5T_NATIVE_INT64, values.data()) < 0)) err = -1;
    if (err < 0 && cause == 0) cause = FailedCallErrno();
    if (attr >= 0) H5Aclose(attr);
    H5Sclose(space);
  }
  H5Dclose(set);
  if (err < 0) return WriteError(tmp_, absl::StrCat("cannot write the attributes of ", name), cause);
  return absl::OkStatus();
}

absl::Status H5Writer::WriteSlice(const std::string& name, const std::vector<int64_t>& shape,
                                  const std::vector<int64_t>& global_shape, const std::vector<int64_t>& offset,
                                  const float* data) {
  if (auto s = WriteDataset(file_, tmp_, name, shape, data); !s.ok()) return s;
  return WriteDatasetAttributes(name, {{"global_shape", global_shape}, {"offset", offset}});
}

absl::Status H5Writer::WritePiece(const std::string& name, int64_t count, const std::vector<int64_t>& global_shape,
                                  int64_t flat_offset, const float* data) {
  if (auto s = WriteDataset(file_, tmp_, name, {count}, data); !s.ok()) return s;
  return WriteDatasetAttributes(name, {{"global_shape", global_shape}, {"flat_offset", {flat_offset}}});
}

absl::Status H5Writer::WriteScalarAttribute(const std::string& name, int64_t type, const void* value) {
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t attr = H5Acreate2(file_, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT);
  const herr_t err = attr < 0 ? -1 : H5Awrite(attr, type, value);
  const absl::Status status =
      err < 0 ? H5WriteError(tmp_, absl::StrCat("cannot write attribute ", name)) : absl::OkStatus();
  if (attr >= 0) H5Aclose(attr);
  H5Sclose(space);
  return status;
  return absl::OkStatus();
}

absl::Status H5Writer::WriteAttribute(const std::string& name, int64_t value) {
  return WriteScalarAttribute(name, H5T_NATIVE_INT64, &value);
}

absl::Status H5Writer::WriteAttribute(const std::string& name, double value) {
  return WriteScalarAttribute(name, H5T_NATIVE_DOUBLE, &value);
}

absl::Status H5Writer::WriteAttribute(const std::string& name, const std::string& value) {
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, value.empty() ? 1 : value.size());
  H5Tset_strpad(type, H5T_STR_NULLPAD);
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t attr = H5Acreate2(file_, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT);
  const std::string padded = value.empty() ? std::string(1, '\0') : value;
  const herr_t err = attr < 0 ? -1 : H5Awrite(attr, type, padded.data());
  const absl::Status status =
      err < 0 ? H5WriteError(tmp_, absl::StrCat("cannot write attribute ", name)) : absl::OkStatus();
  if (attr >= 0) H5Aclose(attr);
  H5Sclose(space);
  H5Tclose(type);
  return status;
}

absl::Status H5Writer::Commit(const std::function<bool()>& cancelled) {
  const herr_t err = H5Fclose(file_);
  file_ = -1;
  if (err < 0) {
    // HDF5 writes cached metadata and small datasets only now: a full disk often shows here.
    const absl::Status status = H5WriteError(tmp_, "closing the HDF5 file failed");
    std::remove(tmp_.c_str());
    return status;
  }
  const int fd = ::open(tmp_.c_str(), O_RDONLY);
  if (fd < 0 || ::fsync(fd) != 0) {
    const absl::Status status = WriteError(tmp_, "fsync failed", errno);
    if (fd >= 0) ::close(fd);
    std::remove(tmp_.c_str());
    return status;
  }
  ::close(fd);
  if (cancelled && cancelled()) {
    std::remove(tmp_.c_str());
    return absl::CancelledError(absl::StrCat(tmp_, ": interrupted before it was renamed into place"));
  }
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    std::remove(tmp_.c_str());
    return absl::DataLossError(absl::StrCat(path_, ": cannot rename ", tmp_, " into place"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<H5Reader>> H5Reader::Open(const std::string& path) {
  QuietHdf5();
  // A FIFO or device would block or stream forever inside HDF5.
  std::error_code ec;
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    return absl::NotFoundError(absl::StrCat(path, ": missing or not an HDF5 file"));
  }
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, FileAccess());
  if (file < 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot open HDF5 file", Cause(FailedCallErrno())));
  }
  return std::unique_ptr<H5Reader>(new H5Reader(path, file));
}

H5Reader::~H5Reader() {
  if (file_ >= 0) H5Fclose(file_);
}

bool H5Reader::Has(const std::string& name) const {
  // Check each path component, since H5Lexists fails on a missing parent.
  size_t pos = 0;
  while (true) {
    pos = name.find('/', pos + 1);
    const std::string prefix = name.substr(0, pos);
    if (H5Lexists(file_, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
    if (pos == std::string::npos) return true;
  }
}

template <typename T>
absl::StatusOr<std::vector<T>> H5Reader::Read(const std::string& name, const std::vector<int64_t>& shape) const {
  auto got = Shape(name);
  if (!got.ok()) return got.status();
  if (*got != shape) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": dataset ", name, " has shape ", ShapeString(*got),
                                                   ", expected ", ShapeString(shape)));
  }
  const hid_t set = H5Dopen2(file_, name.c_str(), H5P_DEFAULT);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<T> out(n);
  const herr_t err = H5Dread(set, NativeType<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data());
  H5Dclose(set);
  if (err < 0) return absl::DataLossError(absl::StrCat(path_, ": cannot read dataset ", name));
  return out;
}

absl::StatusOr<std::vector<float>> H5Reader::ReadFloat(const std::string& name, const std::vector<int64_t>& shape) const {
  return Read<float>(name, shape);
}
absl::StatusOr<std::vector<double>> H5Reader::ReadDouble(const std::string& name, const std::vector<int64_t>& shape) const {
  return Read<double>(name, shape);
}

absl::StatusOr<std::vector<int64_t>> H5Reader::Shape(const std::string& name) const {
  MS_H5_ASSIGN_OR_RETURN(const DatasetInfo info, Describe(name));
  return info.shape;
}

absl::StatusOr<H5Reader::DatasetInfo> H5Reader::Describe(const std::string& name) const {
  if (!Has(name)) return absl::NotFoundError(absl::StrCat(path_, ": missing dataset ", name));
  const hid_t set = H5Dopen2(file_, name.c_str(), H5P_DEFAULT);
  if (set < 0) return absl::InvalidArgumentError(absl::StrCat(path_, ": ", name, " is not a dataset"));
  DatasetInfo info;
  const hid_t space = H5Dget_space(set);
  const H5S_class_t space_class = space < 0 ? H5S_NO_CLASS : H5Sget_simple_extent_type(space);
  const int rank = space_class == H5S_SIMPLE ? H5Sget_simple_extent_ndims(space) : 0;
  bool ok = (space_class == H5S_SIMPLE && rank > 0 && rank <= H5S_MAX_RANK) || space_class == H5S_SCALAR;
  if (ok && rank > 0) {
    std::vector<hsize_t> dims(rank);
    ok = H5Sget_simple_extent_dims(space, dims.data(), nullptr) == rank;
    info.shape.assign(dims.begin(), dims.end());
  }
  if (space >= 0) H5Sclose(space);
  const hid_t type = H5Dget_type(set);
  info.is_float = type >= 0 && H5Tget_class(type) == H5T_FLOAT;
  info.type_bytes = type >= 0 ? static_cast<int64_t>(H5Tget_size(type)) : 0;
  if (type >= 0) H5Tclose(type);
  info.storage_bytes = static_cast<int64_t>(H5Dget_storage_size(set));
  const hid_t dcpl = H5Dget_create_plist(set);
  info.filters = dcpl >= 0 ? H5Pget_nfilters(dcpl) : 0;
  H5D_fill_value_t fill_status = H5D_FILL_VALUE_UNDEFINED;
  if (dcpl >= 0 && H5Pfill_value_defined(dcpl, &fill_status) >= 0 && fill_status == H5D_FILL_VALUE_USER_DEFINED) {
    float fill = 1.0f;
    info.zero_fill = H5Pget_fill_value(dcpl, H5T_NATIVE_FLOAT, &fill) >= 0 && std::bit_cast<uint32_t>(fill) == 0u;
  }
  if (dcpl >= 0) H5Pclose(dcpl);
  H5Dclose(set);
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": dataset ", name, " has no usable dataspace (null, or rank outside 0..", H5S_MAX_RANK, ")"));
  }
  info.elements = 1;
  for (const int64_t d : info.shape) {
    if (d < 0 || (d > 0 && info.elements > INT64_MAX / d)) {
      info.elements = INT64_MAX;
      break;
    }
    info.elements *= d;
  }
  return info;
}

absl::StatusOr<std::vector<int64_t>> H5Reader::ReadDatasetAttribute(const std::string& dataset,
                                                                    const std::string& attr_name) const {
  if (!Has(dataset)) return absl::NotFoundError(absl::StrCat(path_, ": missing dataset ", dataset));
  const hid_t set = H5Dopen2(file_, dataset.c_str(), H5P_DEFAULT);
  if (set < 0 || H5Aexists(set, attr_name.c_str()) <= 0) {
    if (set >= 0) H5Dclose(set);
    return absl::NotFoundError(absl::StrCat(path_, ": dataset ", dataset, " has no attribute ", attr_name));
  }
  const hid_t attr = H5Aopen(set, attr_name.c_str(), H5P_DEFAULT);
  const hid_t space = H5Aget_space(attr);
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  const hid_t type = H5Aget_type(attr);
  const bool integer = type >= 0 && H5Tget_class(type) == H5T_INTEGER;
  if (type >= 0) H5Tclose(type);
  // A shape or offset has at most H5S_MAX_RANK values: nothing larger is allocated.
  const bool fits = integer && n >= 0 && n <= H5S_MAX_RANK;
  std::vector<int64_t> values(fits ? n : 0);
  const herr_t err = fits && n > 0 ? H5Aread(attr, H5T_NATIVE_INT64, values.data()) : 0;
  if (space >= 0) H5Sclose(space);
  H5Aclose(attr);
  H5Dclose(set);
  if (!fits) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": ", dataset, "@", attr_name, " is not an array of at most ",
                                                   H5S_MAX_RANK, " integers"));
  }
  if (err < 0) return absl::DataLossError(absl::StrCat(path_, ": cannot read ", dataset, "@", attr_name));
  return values;
}

absl::Status H5Reader::ReadRows(const std::string& name, int64_t row_begin, int64_t rows, float* out) const {
  auto shape = Shape(name);
  if (!shape.ok()) return shape.status();
  if (shape->empty()) {
    if (row_begin != 0 || rows != 1) return absl::InvalidArgumentError(absl::StrCat(path_, ": ", name, " is a scalar"));
    auto v = ReadFloat(name, {});
    if (!v.ok()) return v.status();
    out[0] = (*v)[0];
    return absl::OkStatus();
  }
  if (row_begin < 0 || rows < 0 || row_begin + rows > (*shape)[0]) {
    return absl::OutOfRangeError(absl::StrCat(path_, ": rows [", row_begin, ", ", row_begin + rows, ") of ", name,
                                              " outside its ", (*shape)[0], " rows"));
  }
  if (rows == 0) return absl::OkStatus();
  const hid_t set = H5Dopen2(file_, name.c_str(), H5P_DEFAULT);
  const hid_t file_space = H5Dget_space(set);
  std::vector<hsize_t> start(shape->size(), 0), count(shape->begin(), shape->end());
  start[0] = row_begin;
  count[0] = rows;
  H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr);
  const hid_t mem_space = H5Screate_simple(int(count.size()), count.data(), nullptr);
  const herr_t err = H5Dread(set, H5T_NATIVE_FLOAT, mem_space, file_space, H5P_DEFAULT, out);
  H5Sclose(mem_space);
  H5Sclose(file_space);
  H5Dclose(set);
  if (err < 0) return absl::DataLossError(absl::StrCat(path_, ": cannot read rows of ", name));
  return absl::OkStatus();
}

std::vector<std::string> H5Reader::DatasetNames() const {
  std::vector<std::string> names;
  H5Ovisit(
      file_, H5_INDEX_NAME, H5_ITER_INC,
      [](hid_t, const char* name, const H5O_info_t* info, void* data) -> herr_t {
        if (info->type == H5O_TYPE_DATASET) static_cast<std::vector<std::string>*>(data)->push_back(name);
        return 0;
      },
      &names);
  return names;
}

std::vector<std::string> H5Reader::RootAttributeNames() const {
  std::vector<std::string> names;
  H5Aiterate2(
      file_, H5_INDEX_NAME, H5_ITER_INC, nullptr,
      [](hid_t, const char* name, const H5A_info_t*, void* data) -> herr_t {
        static_cast<std::vector<std::string>*>(data)->push_back(name);
        return 0;
      },
      &names);
  return names;
}

// Opens root attribute `name` when it is a single value (scalar or one-element
// array) whose class is one of `classes`; `what` describes them for the error.
absl::StatusOr<int64_t> H5Reader::OpenScalarAttribute(const std::string& name, std::initializer_list<int> classes,
                                                      const char* what) const {
  if (H5Aexists(file_, name.c_str()) <= 0) return absl::NotFoundError(absl::StrCat(path_, ": missing attribute ", name));
  const hid_t attr = H5Aopen(file_, name.c_str(), H5P_DEFAULT);
  if (attr < 0) return absl::InvalidArgumentError(absl::StrCat(path_, ": cannot open attribute ", name));
  const hid_t space = H5Aget_space(attr);
  const hssize_t n = space >= 0 ? H5Sget_simple_extent_npoints(space) : -1;
  if (space >= 0) H5Sclose(space);
  const hid_t type = H5Aget_type(attr);
  const int cls = type >= 0 ? static_cast<int>(H5Tget_class(type)) : -1;
  if (type >= 0) H5Tclose(type);
  bool class_ok = false;
  for (const int c : classes) class_ok = class_ok || c == cls;
  if (n != 1 || !class_ok) {
    H5Aclose(attr);
    return absl::InvalidArgumentError(absl::StrCat(path_, ": attribute ", name, " is ",
                                                   n != 1 ? absl::StrCat("an array of ", n, " values") : ClassName(cls),
                                                   ", expected ", what));
  }
  return static_cast<int64_t>(attr);
}

absl::StatusOr<int64_t> H5Reader::ReadIntAttribute(const std::string& name) const {
  MS_H5_ASSIGN_OR_RETURN(const int64_t attr, OpenScalarAttribute(name, {H5T_INTEGER}, "one integer"));
  int64_t value = 0;
  const herr_t err = H5Aread(attr, H5T_NATIVE_INT64, &value);
  H5Aclose(attr);
  if (err < 0) return absl::InvalidArgumentError(absl::StrCat(path_, ": attribute ", name, " is not an int64"));
  return value;
}

absl::StatusOr<double> H5Reader::ReadDoubleAttribute(const std::string& name) const {
  MS_H5_ASSIGN_OR_RETURN(const int64_t attr, OpenScalarAttribute(name, {H5T_INTEGER, H5T_FLOAT}, "one number"));
  double value = 0;
  const herr_t err = H5Aread(attr, H5T_NATIVE_DOUBLE, &value);
  H5Aclose(attr);
  if (err < 0) return absl::InvalidArgumentError(absl::StrCat(path_, ": attribute ", name, " is not a number"));
  return value;
}

absl::StatusOr<std::string> H5Reader::ReadStringAttribute(const std::string& name) const {
  MS_H5_ASSIGN_OR_RETURN(const int64_t attr,
                         OpenScalarAttribute(name, {H5T_STRING}, "one fixed-length string"));
  const hid_t type = H5Aget_type(attr);
  if (H5Tget_class(type) != H5T_STRING || H5Tis_variable_str(type) > 0 || H5Tget_size(type) > (1 << 16)) {
    H5Tclose(type);
    H5Aclose(attr);
    return absl::InvalidArgumentError(absl::StrCat(path_, ": attribute ", name, " is not a fixed-length string"));
  }
  std::string value(H5Tget_size(type), '\0');
  const herr_t err = H5Aread(attr, type, value.data());
  H5Tclose(type);
  H5Aclose(attr);
  if (err < 0) return absl::InvalidArgumentError(absl::StrCat(path_, ": cannot read attribute ", name));
  value.resize(value.find_last_not_of('\0') + 1);
  return value;
}

}  // namespace multiscreen
