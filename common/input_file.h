// Opening the files a user names (run files, model files, token shards, tokenizer
// files) so that a wrong kind of file is an error before anything is read or
// allocated from it: a FIFO would block open() or read() forever, /dev/zero never
// ends, a directory reads as empty; and the output paths a user names, so that an
// output renamed into place never replaces a directory, FIFO or device node. Knows
// nothing about any file format.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace multiscreen {

// Opens `path` read-only without blocking (O_NONBLOCK, so a FIFO cannot hang the
// open), checks that it is a regular file of at most `max_bytes` bytes, and returns
// the descriptor (blocking again; the caller closes it); its size goes to *size.
// `what` names the kind of file in errors ("token shard", "run file").
// Errors name `path`: missing or unreadable, not a regular file (saying which kind:
// a directory, a FIFO, a character device, ...), larger than `max_bytes`.
absl::StatusOr<int> OpenRegularFile(const std::string& path, const char* what, int64_t max_bytes,
                                    int64_t* size);

// OpenRegularFile, then the whole file. Errors as OpenRegularFile, and a failed read.
absl::StatusOr<std::string> ReadRegularFile(const std::string& path, const char* what, int64_t max_bytes);

// Without opening it (stat: a FIFO cannot block), that `path` is a regular file, for
// an input another process reads: missing, or "PATH: is a FIFO (named pipe), not a
// regular file" (a directory, a character device such as /dev/zero, ...).
absl::Status CheckRegularInput(const std::string& path);

// Refuses an output path that exists as anything but a regular file or a symbolic
// link: a directory, a FIFO, a character or block device (/dev/null), a socket. Every
// command writes its output files beside their path (`path`.tmp) and renames them into
// place, which would replace the FIFO or the device node itself with a regular file (as
// root, `--out=/dev/null` would replace the machine's /dev/null). A missing path passes,
// and so does a symbolic link (the rename replaces the link, never its target).
// `flag` names the flag in the error ("--out"; empty: the path alone), e.g.
// "--out=/dev/null: is a character device, not a regular file: an output is written
// beside it and renamed into place, which would replace it; choose a file path".
absl::Status CheckReplaceableOutput(const std::string& flag, const std::string& path);

// Creates the output directory `path` and its missing parents (an existing directory
// passes). Errors, one line naming `flag` ("--output"; empty: the path alone) and the
// reason: "--output=a.txt/b: a.txt is a file, not a directory" (the path, or one of its
// parents, exists as another kind of file), "--out=/proc/x: cannot create /proc/x: No
// such file or directory" (the system's reason: Permission denied, Read-only file
// system, ...).
absl::Status CreateOutputDirectory(const std::string& flag, const std::string& path);

// A byte count for messages: "64 MiB", "1.5 GiB", "1024 bytes".
std::string ByteSize(int64_t bytes);

}  // namespace multiscreen
