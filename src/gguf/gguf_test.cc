#include "gguf/gguf.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <gtest/gtest.h>

namespace kvstash::gguf {
namespace {

namespace fs = std::filesystem;

class GgufTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("gguf_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::string write_bytes(const std::string& name, const std::string& bytes) const {
    std::string p = path(name);
    std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return p;
  }

  static std::string read_bytes(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  // Opens bytes as a file; returns the error (ok status when it opened).
  Status open_bytes(const std::string& bytes, const std::string& name = "bad.gguf") const {
    auto f = File::open(write_bytes(name, bytes));
    return f ? Status::ok() : f.status();
  }

  fs::path dir_;
};

// A hand-built GGUF byte image, for files the Writer would never produce.
struct Raw {
  std::string b;
  template <typename T>
  Raw& put(T v) { b.append(reinterpret_cast<const char*>(&v), sizeof(T)); return *this; }
  Raw& str(const std::string& s) { put<std::uint64_t>(s.size()); b += s; return *this; }
  Raw& header(std::uint64_t n_tensors, std::uint64_t n_kv, std::uint32_t version = 3) {
    b += "GGUF";
    return put<std::uint32_t>(version).put<std::uint64_t>(n_tensors).put<std::uint64_t>(n_kv);
  }
  Raw& tensor(const std::string& name, std::vector<std::uint64_t> dims, std::uint32_t type, std::uint64_t offset) {
    str(name).put<std::uint32_t>(static_cast<std::uint32_t>(dims.size()));
    for (std::uint64_t d : dims) put<std::uint64_t>(d);
    return put<std::uint32_t>(type).put<std::uint64_t>(offset);
  }
  Raw& pad(std::size_t alignment = 32) { b.resize((b.size() + alignment - 1) / alignment * alignment, '\0'); return *this; }
  Raw& data(std::size_t n, char fill = 'x') { b.append(n, fill); return *this; }
};

std::uint8_t pattern_byte(std::size_t tensor, std::size_t k) { return static_cast<std::uint8_t>(tensor * 37 + k * 11 + 5); }

Writer::FillFn pattern_fill() {
  return [](std::size_t i, std::span<std::uint8_t> out) {
    for (std::size_t k = 0; k < out.size(); ++k) out[k] = pattern_byte(i, k);
    return Status::ok();
  };
}

Value nested_array() {
  Array inner_u8{ValueType::kU8, {Value{ValueType::kU8, std::uint64_t{1}}, Value{ValueType::kU8, std::uint64_t{255}}}};
  Array inner_str{ValueType::kString, {Value::string("x"), Value::string("")}};
  Array empty_i64{ValueType::kI64, {}};
  Array outer{ValueType::kArray,
              {Value{ValueType::kArray, inner_u8}, Value{ValueType::kArray, inner_str}, Value{ValueType::kArray, empty_i64}}};
  return Value{ValueType::kArray, outer};
}

std::vector<std::pair<std::string, Value>> every_value_type() {
  return {
      {"t.u8", Value{ValueType::kU8, std::uint64_t{200}}},
      {"t.i8", Value{ValueType::kI8, std::int64_t{-100}}},
      {"t.u16", Value{ValueType::kU16, std::uint64_t{60000}}},
      {"t.i16", Value{ValueType::kI16, std::int64_t{-30000}}},
      {"t.u32", Value::u32(4000000000u)},
      {"t.i32", Value::i32(-2000000000)},
      {"t.f32", Value::f32(0.1f)},
      {"t.bool", Value::boolean(true)},
      {"t.bool_false", Value::boolean(false)},
      {"t.string", Value::string("héllo\nworld")},
      {"t.empty_string", Value::string("")},
      {"t.u64", Value::u64(0xfedcba9876543210ull)},
      {"t.i64", Value{ValueType::kI64, std::int64_t{-0x123456789abcll}}},
      {"t.f64", Value{ValueType::kF64, 3.141592653589793}},
      {"t.strings", Value::string_array({"a b", "", "Ġthe", "<|im_end|>"})},
      {"t.i32s", Value::i32_array({1, -2, 3})},
      {"t.f32s", Value::f32_array({0.5f, -1e-6f})},
      {"t.nested", nested_array()},
  };
}

TEST_F(GgufTest, RoundTripsEveryValueTypeAndTensorBytes) {
  Writer w;
  auto kvs = every_value_type();
  for (auto& [k, v] : kvs) w.set(k, v);
  w.set("t.u8", Value{ValueType::kU8, std::uint64_t{7}});  // replaces in place, keeps order
  kvs[0].second = Value{ValueType::kU8, std::uint64_t{7}};
  ASSERT_TRUE(w.add_tensor("a.f32", TensorType::kF32, {8, 3}).is_ok());
  ASSERT_TRUE(w.add_tensor("b.f16", TensorType::kF16, {5}).is_ok());
  ASSERT_TRUE(w.add_tensor("c.q8_0", TensorType::kQ8_0, {64, 2}).is_ok());
  ASSERT_TRUE(w.add_tensor("d.i32", TensorType::kI32, {3, 1, 1, 2}).is_ok());
  ASSERT_TRUE(w.add_tensor("e.bf16", TensorType::kBF16, {4, 2, 2}).is_ok());
  ASSERT_TRUE(w.add_tensor("f.q4_K", TensorType::kQ4_K, {256}).is_ok());
  std::string p = path("rt.gguf");
  ASSERT_TRUE(w.write(p, pattern_fill()).is_ok());
  EXPECT_FALSE(fs::exists(p + ".tmp-" + std::to_string(::getpid())));

  auto f = File::open(p);
  ASSERT_TRUE(f) << f.status().to_string();
  EXPECT_EQ((*f)->version(), 3u);
  ASSERT_EQ((*f)->metadata().size(), kvs.size());
  for (std::size_t i = 0; i < kvs.size(); ++i) {
    EXPECT_EQ((*f)->metadata()[i].first, kvs[i].first);
    EXPECT_TRUE((*f)->metadata()[i].second == kvs[i].second) << kvs[i].first << ": " << describe_value((*f)->metadata()[i].second);
  }
  struct Want { const char* name; TensorType type; std::vector<std::uint64_t> dims; std::uint64_t bytes; };
  std::vector<Want> want = {{"a.f32", TensorType::kF32, {8, 3}, 96},   {"b.f16", TensorType::kF16, {5}, 10},
                            {"c.q8_0", TensorType::kQ8_0, {64, 2}, 136}, {"d.i32", TensorType::kI32, {3, 1, 1, 2}, 24},
                            {"e.bf16", TensorType::kBF16, {4, 2, 2}, 32}, {"f.q4_K", TensorType::kQ4_K, {256}, 144}};
  ASSERT_EQ((*f)->tensors().size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    const TensorInfo* t = (*f)->find_tensor(want[i].name);
    ASSERT_NE(t, nullptr) << want[i].name;
    EXPECT_EQ(t, &(*f)->tensors()[i]);
    EXPECT_EQ(t->type, want[i].type);
    EXPECT_EQ(t->dims, want[i].dims);
    EXPECT_EQ(t->n_bytes, want[i].bytes);
    EXPECT_EQ(t->offset % 32, 0u);
    EXPECT_EQ((t->data - (*f)->data_begin()) % 32, 0);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t->data) % 32, 0u);  // mmap is page aligned
    for (std::size_t k = 0; k < t->n_bytes; ++k) {
      ASSERT_EQ(t->data[k], pattern_byte(i, k)) << want[i].name << " byte " << k;
    }
  }
  EXPECT_EQ((*f)->find_tensor("missing"), nullptr);
  EXPECT_EQ((*f)->find("missing"), nullptr);
}

TEST_F(GgufTest, HonoursCustomAlignment) {
  Writer w;
  w.set("general.alignment", Value::u32(256));
  ASSERT_TRUE(w.add_tensor("a", TensorType::kF32, {3}).is_ok());
  ASSERT_TRUE(w.add_tensor("b", TensorType::kF32, {3}).is_ok());
  ASSERT_TRUE(w.write(path("al.gguf"), pattern_fill()).is_ok());
  auto f = File::open(path("al.gguf"));
  ASSERT_TRUE(f) << f.status().to_string();
  EXPECT_EQ((*f)->tensors()[0].data, (*f)->data_begin());
  EXPECT_EQ((*f)->tensors()[1].offset, 256u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>((*f)->data_begin()) % 256, 0u);
}

TEST_F(GgufTest, TypedGettersConvertAndRefuse) {
  Writer w;
  for (auto& [k, v] : every_value_type()) w.set(k, v);
  ASSERT_TRUE(w.write(path("g.gguf"), pattern_fill()).is_ok());
  auto opened = File::open(path("g.gguf"));
  ASSERT_TRUE(opened) << opened.status().to_string();
  const File& f = **opened;

  EXPECT_EQ(*f.get_uint("t.u8"), 200u);
  EXPECT_EQ(*f.get_uint("t.u32"), 4000000000u);
  EXPECT_EQ(*f.get_uint("t.u64"), 0xfedcba9876543210ull);
  EXPECT_EQ(*f.get_int("t.i8"), -100);
  EXPECT_EQ(*f.get_int("t.u16"), 60000);  // unsigned converts when it fits
  EXPECT_EQ(*f.get_int("t.i64"), -0x123456789abcll);
  EXPECT_EQ(f.get_int("t.u64").status().code(), StatusCode::kInvalidArgument);   // > INT64_MAX
  EXPECT_EQ(f.get_uint("t.i32").status().code(), StatusCode::kInvalidArgument);  // negative
  EXPECT_EQ(*f.get_float("t.f32"), static_cast<double>(0.1f));
  EXPECT_EQ(*f.get_float("t.f64"), 3.141592653589793);
  EXPECT_EQ(*f.get_float("t.u16"), 60000.0);
  EXPECT_EQ(*f.get_bool("t.bool"), true);
  EXPECT_EQ(*f.get_bool("t.bool_false"), false);
  EXPECT_EQ(*f.get_string("t.string"), "héllo\nworld");
  EXPECT_EQ(*f.get_string_array("t.strings"), (std::vector<std::string>{"a b", "", "Ġthe", "<|im_end|>"}));
  EXPECT_EQ(*f.get_int_array("t.i32s"), (std::vector<std::int64_t>{1, -2, 3}));

  EXPECT_EQ(f.get_string("t.u32").status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(f.get_string("t.u32").status().message().find("t.u32"), std::string::npos);
  EXPECT_EQ(f.get_uint("t.string").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f.get_float("t.bool").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f.get_bool("t.u8").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f.get_string_array("t.i32s").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f.get_int_array("t.strings").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f.get_int_array("t.f32s").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f.get_uint("nope").status().code(), StatusCode::kNotFound);
  EXPECT_NE(f.get_uint("nope").status().message().find("nope"), std::string::npos);
}

TEST_F(GgufTest, WriterRefusesBadTensors) {
  Writer w;
  EXPECT_EQ(w.add_tensor("q", TensorType::kQ8_0, {33}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.add_tensor("z", TensorType::kF32, {4, 0}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.add_tensor("five", TensorType::kF32, {1, 1, 1, 1, 1}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.add_tensor("t99", static_cast<TensorType>(99), {256}).code(), StatusCode::kUnsupported);
  ASSERT_TRUE(w.add_tensor("a", TensorType::kF32, {4}).is_ok());
  EXPECT_EQ(w.add_tensor("a", TensorType::kF32, {4}).code(), StatusCode::kInvalidArgument);
}

// A quantized tensor cut short by a truncated file, or whose row length does not fill whole
// blocks, is refused with an error that names it.
TEST_F(GgufTest, TruncatedOrInconsistentQuantizedTensorIsRefusedByName) {
  Writer w;
  ASSERT_TRUE(w.add_tensor("blk.0.ffn_down.weight", TensorType::kQ4_K, {512, 2}).is_ok());
  ASSERT_TRUE(w.add_tensor("blk.0.attn_v.weight", TensorType::kQ6_K, {256, 2}).is_ok());
  const std::string p = path("q.gguf");
  ASSERT_TRUE(w.write(p, pattern_fill()).is_ok());
  ASSERT_TRUE(File::open(p)) << "the intact file opens";

  const std::uintmax_t size = fs::file_size(p);
  fs::copy_file(p, path("cut.gguf"));
  fs::resize_file(path("cut.gguf"), size - 100);  // inside the last tensor, the q6_K one
  auto cut = File::open(path("cut.gguf"));
  ASSERT_FALSE(cut);
  EXPECT_EQ(cut.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(cut.status().message().find("blk.0.attn_v.weight"), std::string::npos) << cut.status().message();

  // Row length 512 -> 400: not a multiple of q4_K's 256-weight super-block.
  std::string bytes;
  {
    std::ifstream in(p, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const std::string name = "blk.0.ffn_down.weight";
  const std::size_t at = bytes.find(name) + name.size() + 4;  // after the name: u32 n_dims, then dims[0]
  std::uint64_t dim0;
  std::memcpy(&dim0, bytes.data() + at, 8);
  ASSERT_EQ(dim0, 512u);
  dim0 = 400;
  std::memcpy(bytes.data() + at, &dim0, 8);
  std::ofstream(path("bad.gguf"), std::ios::binary) << bytes;
  auto bad = File::open(path("bad.gguf"));
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(bad.status().message().find(name), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("q4_K"), std::string::npos) << bad.status().message();
}

TEST_F(GgufTest, FailedFillLeavesNoFile) {
  Writer w;
  ASSERT_TRUE(w.add_tensor("a", TensorType::kF32, {4}).is_ok());
  Status st = w.write(path("fail.gguf"), [](std::size_t, std::span<std::uint8_t>) { return internal_error("boom"); });
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(GgufTest, TypeNamesAndLayouts) {
  std::size_t e = 0, b = 0;
  ASSERT_TRUE(tensor_type_layout(TensorType::kQ8_0, &e, &b));
  EXPECT_EQ(e, 32u); EXPECT_EQ(b, 34u);
  ASSERT_TRUE(tensor_type_layout(TensorType::kQ6_K, &e, &b));
  EXPECT_EQ(e, 256u); EXPECT_EQ(b, 210u);
  ASSERT_TRUE(tensor_type_layout(TensorType::kBF16, &e, &b));
  EXPECT_EQ(e, 1u); EXPECT_EQ(b, 2u);
  ASSERT_TRUE(tensor_type_layout(TensorType::kIQ4_XS, &e, &b));  // known so that loaders can name it
  EXPECT_EQ(e, 256u); EXPECT_EQ(b, 136u);
  ASSERT_TRUE(tensor_type_layout(TensorType::kQ3_K, &e, &b));
  EXPECT_EQ(e, 256u); EXPECT_EQ(b, 110u);
  ASSERT_TRUE(tensor_type_layout(TensorType::kQ5_1, &e, &b));
  EXPECT_EQ(e, 32u); EXPECT_EQ(b, 24u);
  ASSERT_TRUE(tensor_type_layout(static_cast<TensorType>(39), &e, &b));  // MXFP4 (gpt-oss)
  EXPECT_EQ(e, 32u); EXPECT_EQ(b, 17u);
  EXPECT_EQ(tensor_type_name(TensorType::kMXFP4), "mxfp4");
  EXPECT_FALSE(tensor_type_layout(static_cast<TensorType>(99), &e, &b));
  EXPECT_EQ(tensor_type_name(TensorType::kQ4_K), "q4_K");
  EXPECT_EQ(tensor_type_name(static_cast<TensorType>(99)), "type 99");
}

// A small file whose last tensor ends exactly at the end: every strict prefix is damaged.
TEST_F(GgufTest, EveryTruncationIsAnErrorNotACrash) {
  Writer w;
  w.set("general.architecture", Value::string("llama"));
  w.set("list", Value::string_array({"ab", "c"}));
  w.set("nested", nested_array());
  w.set("n", Value::u32(3));
  ASSERT_TRUE(w.add_tensor("t0", TensorType::kF32, {8}).is_ok());
  ASSERT_TRUE(w.add_tensor("t1", TensorType::kQ8_0, {32}).is_ok());
  ASSERT_TRUE(w.add_tensor("t2", TensorType::kF16, {16}).is_ok());
  ASSERT_TRUE(w.write(path("full.gguf"), pattern_fill()).is_ok());
  const std::string full = read_bytes(path("full.gguf"));
  ASSERT_TRUE(File::open(path("full.gguf"))) << "the intact file must open";
  for (std::size_t len = 0; len < full.size(); ++len) {
    Status st = open_bytes(full.substr(0, len), "cut.gguf");
    ASSERT_FALSE(st.is_ok()) << "prefix of " << len << " bytes opened";
    EXPECT_EQ(st.code(), StatusCode::kCorrupt) << len << ": " << st.to_string();
    EXPECT_NE(st.message().find("cut.gguf"), std::string::npos) << st.message();
  }
}

TEST_F(GgufTest, RejectsWrongMagic) {
  Raw r;
  r.b = "GGML";
  r.put<std::uint32_t>(3).put<std::uint64_t>(0).put<std::uint64_t>(0);
  Status st = open_bytes(r.b);
  EXPECT_EQ(st.code(), StatusCode::kCorrupt);
  EXPECT_NE(st.message().find("magic"), std::string::npos) << st.message();
}

TEST_F(GgufTest, VersionTwoOpensOthersAreUnsupported) {
  EXPECT_TRUE(open_bytes(Raw().header(0, 0, 2).b).is_ok());
  EXPECT_TRUE(open_bytes(Raw().header(0, 0, 3).b).is_ok());
  Status st = open_bytes(Raw().header(0, 0, 4).b);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  EXPECT_NE(st.message().find("version 4"), std::string::npos) << st.message();
  EXPECT_EQ(open_bytes(Raw().header(0, 0, 1).b).code(), StatusCode::kUnsupported);
}

TEST_F(GgufTest, RejectsTensorDataOutOfBounds) {
  Raw r;
  r.header(1, 0).tensor("blk.0.attn_q.weight", {4, 4}, 0, 0).pad().data(60);  // needs 64
  Status st = open_bytes(r.b, "model.gguf");
  EXPECT_EQ(st.code(), StatusCode::kCorrupt);
  EXPECT_NE(st.message().find("model.gguf: tensor 'blk.0.attn_q.weight' data [offset 0, 64 bytes] ends past the end"),
            std::string::npos) << st.message();

  Raw huge_offset;
  huge_offset.header(1, 0).tensor("t", {4}, 0, 0xffffffffffffffe0ull).pad().data(64);
  EXPECT_EQ(open_bytes(huge_offset.b).code(), StatusCode::kCorrupt);
}

TEST_F(GgufTest, RejectsMisalignedAndOverlappingData) {
  Raw r;
  r.header(1, 0).tensor("t", {4}, 0, 8).pad().data(64);
  Status st = open_bytes(r.b);
  EXPECT_EQ(st.code(), StatusCode::kCorrupt);
  EXPECT_NE(st.message().find("not aligned"), std::string::npos) << st.message();

  Raw overlap;
  overlap.header(2, 0).tensor("a", {16}, 0, 0).tensor("b", {16}, 0, 32).pad().data(128);
  st = open_bytes(overlap.b);
  EXPECT_EQ(st.code(), StatusCode::kCorrupt);
  EXPECT_NE(st.message().find("overlap"), std::string::npos) << st.message();
}

TEST_F(GgufTest, RejectsUnknownTensorType) {
  Raw r;
  r.header(1, 0).tensor("w", {32}, 99, 0).pad().data(256);
  Status st = open_bytes(r.b);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  EXPECT_NE(st.message().find("type 99"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("'w'"), std::string::npos) << st.message();
}

TEST_F(GgufTest, RejectsBadShapes) {
  Raw five_dims;
  five_dims.header(1, 0).tensor("t", {1, 1, 1, 1, 1}, 0, 0).pad().data(32);
  EXPECT_EQ(open_bytes(five_dims.b).code(), StatusCode::kCorrupt);
  Raw zero_dim;
  zero_dim.header(1, 0).tensor("t", {4, 0}, 0, 0).pad().data(32);
  EXPECT_EQ(open_bytes(zero_dim.b).code(), StatusCode::kCorrupt);
  Raw overflow;
  overflow.header(1, 0).tensor("t", {1ull << 32, 1ull << 32, 2}, 0, 0).pad().data(32);
  Status st = open_bytes(overflow.b);
  EXPECT_EQ(st.code(), StatusCode::kCorrupt);
  EXPECT_NE(st.message().find("overflow"), std::string::npos) << st.message();
  Raw bad_row;
  bad_row.header(1, 0).tensor("t", {33}, 8, 0).pad().data(64);  // q8_0 rows are multiples of 32
  EXPECT_EQ(open_bytes(bad_row.b).code(), StatusCode::kCorrupt);
}

TEST_F(GgufTest, RejectsHugeStringLength) {
  Raw r;
  r.header(0, 1).put<std::uint64_t>(0xffffffffffffff00ull).data(64);
  Status st = open_bytes(r.b);
  EXPECT_EQ(st.code(), StatusCode::kCorrupt);
  EXPECT_NE(st.message().find("string length"), std::string::npos) << st.message();

  Raw value;
  value.header(0, 1).str("k").put<std::uint32_t>(8).put<std::uint64_t>(1ull << 40).data(16);
  st = open_bytes(value.b);
  EXPECT_EQ(st.code(), StatusCode::kCorrupt);
  EXPECT_NE(st.message().find("'k'"), std::string::npos) << st.message();
}

TEST_F(GgufTest, RejectsHugeArrayCount) {
  Raw r;
  r.header(0, 1).str("tokenizer.ggml.tokens").put<std::uint32_t>(9).put<std::uint32_t>(8).put<std::uint64_t>(1ull << 60).data(64);
  Status st = open_bytes(r.b);
  EXPECT_EQ(st.code(), StatusCode::kCorrupt);
  EXPECT_NE(st.message().find("array count"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("tokenizer.ggml.tokens"), std::string::npos) << st.message();

  Raw counts;
  counts.header(1ull << 62, 1ull << 62);
  EXPECT_EQ(open_bytes(counts.b).code(), StatusCode::kCorrupt);
}

// Issue 8: an array whose elements are all present in the file can still ask for far more memory
// than the file holds (a 1-byte u8 is a whole Value in memory): refused with a named error, never a
// bad_alloc. 4 MiB of u8 would take 4M Values (about 220 MiB); a small array still opens.
TEST_F(GgufTest, RejectsMetadataArraysFarLargerInMemoryThanTheFile) {
  const std::uint64_t n = 4u << 20;
  Raw r;
  r.header(0, 1).str("general.blob").put<std::uint32_t>(9).put<std::uint32_t>(0).put<std::uint64_t>(n).data(n, '\1');
  Status st = open_bytes(r.b);
  EXPECT_EQ(st.code(), StatusCode::kCorrupt);
  EXPECT_NE(st.message().find("too many elements"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("general.blob"), std::string::npos) << st.message();

  Raw small;
  small.header(0, 1).str("general.blob").put<std::uint32_t>(9).put<std::uint32_t>(0).put<std::uint64_t>(1000).data(1000, '\1');
  EXPECT_TRUE(open_bytes(small.b).is_ok());
}

TEST_F(GgufTest, RejectsBadValues) {
  Raw bad_type;
  bad_type.header(0, 1).str("k").put<std::uint32_t>(13).put<std::uint32_t>(0);
  EXPECT_EQ(open_bytes(bad_type.b).code(), StatusCode::kCorrupt);
  Raw bad_bool;
  bad_bool.header(0, 1).str("k").put<std::uint32_t>(7).put<std::uint8_t>(2);
  EXPECT_EQ(open_bytes(bad_bool.b).code(), StatusCode::kCorrupt);
  Raw deep;  // arrays nested without end
  deep.header(0, 1).str("k").put<std::uint32_t>(9);
  for (int i = 0; i < 100; ++i) deep.put<std::uint32_t>(9).put<std::uint64_t>(1);
  EXPECT_EQ(open_bytes(deep.b).code(), StatusCode::kCorrupt);
  Raw bad_alignment;
  bad_alignment.header(0, 1).str("general.alignment").put<std::uint32_t>(4).put<std::uint32_t>(48);
  EXPECT_EQ(open_bytes(bad_alignment.b).code(), StatusCode::kCorrupt);
}

TEST_F(GgufTest, RejectsDuplicateNames) {
  Raw tensors;
  tensors.header(2, 0).tensor("blk.0.ffn_up.weight", {8}, 0, 0).tensor("blk.0.ffn_up.weight", {8}, 0, 32).pad().data(64);
  Status st = open_bytes(tensors.b);
  EXPECT_EQ(st.code(), StatusCode::kCorrupt);
  EXPECT_NE(st.message().find("duplicate tensor name 'blk.0.ffn_up.weight'"), std::string::npos) << st.message();

  Raw keys;
  keys.header(0, 2).str("a").put<std::uint32_t>(4).put<std::uint32_t>(1).str("a").put<std::uint32_t>(4).put<std::uint32_t>(2);
  st = open_bytes(keys.b);
  EXPECT_EQ(st.code(), StatusCode::kCorrupt);
  EXPECT_NE(st.message().find("duplicate key 'a'"), std::string::npos) << st.message();
}

TEST_F(GgufTest, MissingFileIsNotFound) {
  auto f = File::open(path("absent.gguf"));
  ASSERT_FALSE(f);
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
  EXPECT_NE(f.status().message().find("absent.gguf"), std::string::npos);
}

TEST_F(GgufTest, OpensTheSharedVocabularies) {
  for (const char* name : {"ggml-vocab-qwen2.gguf", "ggml-vocab-llama-bpe.gguf"}) {
    std::string p = std::string(KVSTASH_SHARED_DIR) + "/vocab/" + name;
    ASSERT_TRUE(fs::exists(p)) << p << " is absent (tests read ../shared/vocab beside the checkout)";
    auto f = File::open(p);
    ASSERT_TRUE(f) << f.status().to_string();
    auto tokens = (*f)->get_string_array("tokenizer.ggml.tokens");
    ASSERT_TRUE(tokens) << tokens.status().to_string();
    EXPECT_GT(tokens->size(), 100000u);
    EXPECT_EQ(*(*f)->get_string("tokenizer.ggml.model"), "gpt2");
  }
}

}  // namespace
}  // namespace kvstash::gguf
