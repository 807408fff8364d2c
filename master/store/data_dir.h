// The master's data at rest (issue 46, finding 5): its data dir is private
// to the master's user (0700) and its SQLite files (det.db, -wal, -shm) are
// 0600, so another local user (a trial on a single-node install) cannot copy
// password and token hashes or configs. As PostgreSQL does with its data
// directory, the master refuses to start on a data dir that group or others
// can read, write or enter, unless told otherwise.
//
// Not thread-safe with another process creating the same files; called once
// at start-up.
#ifndef DET_MASTER_STORE_DATA_DIR_H_
#define DET_MASTER_STORE_DATA_DIR_H_

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"

namespace det::master {

// The flag that lets the master start on a group- or world-accessible data
// dir (named in PreparePrivateDataDir's error).
inline constexpr char kAllowInsecureDataDirFlag[] = "--allow-insecure-data-dir";

// Creates `dir` mode 0700 (missing parents too, as the umask allows) when it
// does not exist. Then, when group or others have any permission on it:
// FailedPrecondition naming the dir, its mode and the fixes (`chmod 700
// DIR`, or kAllowInsecureDataDirFlag) unless `allow_insecure`, which logs a
// warning instead. InvalidArgument when `dir` is empty, not a directory or
// cannot be created or read (naming --data-dir and the OS error).
// Also FailedPrecondition (unless `allow_insecure`) when `dir` is not owned
// by the master's effective uid, naming the owner and the fix (`chown`).
absl::Status PreparePrivateDataDir(const std::string& dir, bool allow_insecure);

// PreparePrivateDataDir for a master running as `master_euid` (tests).
absl::Status PreparePrivateDataDirOf(const std::string& dir, bool allow_insecure, uid_t master_euid);

// Makes the SQLite database `db_path` private before SQLite opens it:
// creates it empty with mode 0600 when it does not exist (SQLite gives its
// -wal and -shm files the database file's mode), and sets mode 0600 on
// db_path, db_path-wal and db_path-shm where they exist with group or other
// permissions (one log line each). Unavailable naming the file and the OS
// error when it cannot.
absl::Status MakeDatabaseFilesPrivate(const std::string& db_path);

// A lost database (issue 47): det-master refuses to create an empty database
// where a cluster's state already lies, since that silently starts an empty
// cluster over it (e.g. a restart after det.db was deleted under a running
// master). The flag that allows it anyway, named in the refusal:
inline constexpr char kInitEmptyDbFlag[] = "--init-empty-db";
// DATA_DIR/cluster-id: the cluster id of the database the master last served
// from this data dir, written at each start (RecordClusterId).
inline constexpr char kClusterIdFile[] = "cluster-id";

// Before the database is opened (SQLite would create a missing one): when
// `db_path` is missing or 0 bytes long while `data_dir` holds a cluster's
// state (its cluster-id file, a non-empty artifacts/ or checkpoints/,
// db_path's -wal, -shm or -journal, a .det-backup-* file),
// FailedPrecondition naming what was found and the fixes (restore the
// database from a backup, or kInitEmptyDbFlag), unless `init_empty_db`
// (then a warning is logged). OK otherwise: a fresh data dir, or the
// database is there.
absl::Status CheckDatabaseNotLost(const std::string& data_dir, const std::string& db_path, bool init_empty_db);

// Writes `cluster_id` to DATA_DIR/cluster-id (0600, replaced atomically);
// Unavailable naming the file and the OS error when it cannot.
absl::Status RecordClusterId(const std::string& data_dir, const std::string& cluster_id);

}  // namespace det::master

#endif  // DET_MASTER_STORE_DATA_DIR_H_
