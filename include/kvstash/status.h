// Errors as values. Every fallible call across a module boundary returns a Status or an
// Expected<T>; exceptions never cross module boundaries.
//
// Thread safety: Status and Expected are plain values; copies may be used from any thread.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace kvstash {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // the caller passed something malformed
  kNotFound,         // a named thing (file, tensor, key) does not exist
  kCorrupt,          // a file or payload failed validation
  kUnsupported,      // valid input that this build does not handle (architecture, tensor type)
  kIoError,          // the operating system refused (open, read, mmap, write)
  kResourceExhausted,  // out of KV blocks, queue full, disk full
  kUnavailable,      // a remote service is unreachable or timed out
  kInternal,         // a broken invariant; a bug
};

const char* status_code_name(StatusCode code);

class Status {
 public:
  Status() = default;  // ok
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }
  bool is_ok() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "corrupt: tensor blk.0.attn_q.weight: data out of bounds"
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status corrupt(std::string m) { return {StatusCode::kCorrupt, std::move(m)}; }
inline Status unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
inline Status io_error(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status resource_exhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// A value or the Status that explains why there is none. A stand-in for C++23 std::expected.
template <typename T>
class Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}           // NOLINT: implicit by design
  Expected(Status status) : v_(std::move(status)) {     // NOLINT: implicit by design
    assert(!std::get<Status>(v_).is_ok() && "Expected built from an ok Status");
  }

  bool has_value() const { return v_.index() == 0; }
  explicit operator bool() const { return has_value(); }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  // The error; only valid when !has_value().
  const Status& status() const { return std::get<Status>(v_); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace kvstash

// Propagate a non-ok Status from an expression returning Status.
#define KVSTASH_RETURN_IF_ERROR(expr)          \
  do {                                         \
    ::kvstash::Status _st = (expr);            \
    if (!_st.is_ok()) return _st;              \
  } while (0)
