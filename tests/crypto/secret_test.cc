#include "lattice/crypto/secret.h"

#include <gtest/gtest.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace lattice::crypto {
namespace {

namespace fs = std::filesystem;

class SecretFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("lattice-secret-test-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ::unsetenv(kSecretEnv);
    ::unsetenv(kSecretFileEnv);
  }
  void TearDown() override {
    fs::remove_all(dir_);
    ::unsetenv(kSecretEnv);
    ::unsetenv(kSecretFileEnv);
  }
  std::string path(const char* name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

TEST(SecretTest, GenerateGivesDistinctSecrets) {
  auto a = ClusterSecret::generate();
  auto b = ClusterSecret::generate();
  EXPECT_FALSE(a == b);
  EXPECT_TRUE(a == a);
  EXPECT_EQ(a.to_hex().size(), 64u);
}

TEST(SecretTest, ParsesHexAndBase64Forms) {
  ClusterSecret::Bytes raw;
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<uint8_t>(i * 7 + 1);
  auto s = ClusterSecret::from_bytes(raw);
  // Hex, with surrounding whitespace and upper case.
  std::string hex = s.to_hex();
  auto h = ClusterSecret::parse("  " + hex + "\n");
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  EXPECT_TRUE(*h == s);
  std::string upper = hex;
  for (auto& c : upper) c = static_cast<char>(std::toupper(c));
  ASSERT_TRUE(ClusterSecret::parse(upper).ok());
  EXPECT_TRUE(*ClusterSecret::parse(upper) == s);
  // Base64 through libsodium's encoder as the oracle, in every variant.
  for (int variant : {sodium_base64_VARIANT_ORIGINAL, sodium_base64_VARIANT_ORIGINAL_NO_PADDING,
                      sodium_base64_VARIANT_URLSAFE, sodium_base64_VARIANT_URLSAFE_NO_PADDING}) {
    char b64[64];
    sodium_bin2base64(b64, sizeof b64, raw.data(), raw.size(), variant);
    auto b = ClusterSecret::parse(b64);
    ASSERT_TRUE(b.ok()) << b64 << ": " << b.status().to_string();
    EXPECT_TRUE(*b == s);
  }
}

TEST(SecretTest, RejectsWrongLengthsAndGarbage) {
  EXPECT_EQ(ClusterSecret::parse("").status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(ClusterSecret::parse(std::string(62, 'a')).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(ClusterSecret::parse(std::string(66, 'a')).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(ClusterSecret::parse(std::string(63, 'a') + "g").status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(ClusterSecret::parse("aGVsbG8=").status().code(), ErrorCode::kInvalidArgument);  // 5 bytes
  // The message must not echo the secret text.
  std::string bad = std::string(63, 'b') + "z";
  EXPECT_EQ(ClusterSecret::parse(bad).status().message().find(bad), std::string::npos);
}

TEST(SecretTest, FingerprintIsStableAndDiffers) {
  auto a = ClusterSecret::generate();
  auto b = ClusterSecret::generate();
  EXPECT_EQ(a.fingerprint(), ClusterSecret(a).fingerprint());
  EXPECT_NE(a.fingerprint(), b.fingerprint());
  EXPECT_EQ(a.fingerprint().size(), 8u);
  EXPECT_EQ(a.to_hex().find(a.fingerprint()), std::string::npos);
}

TEST_F(SecretFileTest, WriteCreatesMode0600AndRoundTrips) {
  ::umask(0);  // the worst umask: the file must still come out 0600
  auto s = ClusterSecret::generate();
  ASSERT_TRUE(write_secret_file(path("k"), s, false).ok());
  ::umask(022);
  struct stat st {};
  ASSERT_EQ(::stat(path("k").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  auto back = load_secret_file(path("k"));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_TRUE(*back == s);
  std::ifstream in(path("k"));
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, s.to_hex());
}

TEST_F(SecretFileTest, RefusesToOverwriteWithoutForce) {
  auto a = ClusterSecret::generate();
  auto b = ClusterSecret::generate();
  ASSERT_TRUE(write_secret_file(path("k"), a, false).ok());
  Status st = write_secret_file(path("k"), b, false);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("--force"), std::string::npos);
  EXPECT_TRUE(*load_secret_file(path("k")) == a);
  // With force, also replacing a file someone loosened: the new one is 0600 again.
  ASSERT_EQ(::chmod(path("k").c_str(), 0644), 0);
  ASSERT_TRUE(write_secret_file(path("k"), b, true).ok());
  struct stat s {};
  ASSERT_EQ(::stat(path("k").c_str(), &s), 0);
  EXPECT_EQ(s.st_mode & 07777, 0600u);
  EXPECT_TRUE(*load_secret_file(path("k")) == b);
}

TEST_F(SecretFileTest, LoadRefusesGroupOrWorldAccessibleFiles) {
  auto s = ClusterSecret::generate();
  ASSERT_TRUE(write_secret_file(path("k"), s, false).ok());
  for (mode_t mode : {0640, 0604, 0660, 0606, 0620}) {
    ASSERT_EQ(::chmod(path("k").c_str(), mode), 0);
    auto r = load_secret_file(path("k"));
    EXPECT_EQ(r.status().code(), ErrorCode::kAccessDenied) << std::oct << mode;
    EXPECT_NE(r.status().message().find("chmod 600"), std::string::npos);
  }
  ASSERT_EQ(::chmod(path("k").c_str(), 0400), 0);
  EXPECT_TRUE(load_secret_file(path("k")).ok());
}

TEST_F(SecretFileTest, LoadRejectsMissingSymlinkAndJunk) {
  EXPECT_EQ(load_secret_file(path("missing")).status().code(), ErrorCode::kNotFound);
  auto s = ClusterSecret::generate();
  ASSERT_TRUE(write_secret_file(path("k"), s, false).ok());
  fs::create_symlink(path("k"), path("link"));
  EXPECT_EQ(load_secret_file(path("link")).status().code(), ErrorCode::kAccessDenied);
  {
    std::ofstream out(path("junk"));
    out << "not a secret\n";
  }
  ASSERT_EQ(::chmod(path("junk").c_str(), 0600), 0);
  EXPECT_EQ(load_secret_file(path("junk")).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(load_secret_file(dir_.string()).status().code(), ErrorCode::kInvalidArgument);  // a directory
}

TEST_F(SecretFileTest, LoadSecretPrefersPathThenEnvThenEnvFile) {
  auto a = ClusterSecret::generate();
  auto b = ClusterSecret::generate();
  auto c = ClusterSecret::generate();
  ASSERT_TRUE(write_secret_file(path("a"), a, false).ok());
  ASSERT_TRUE(write_secret_file(path("c"), c, false).ok());
  EXPECT_EQ(load_secret("").status().code(), ErrorCode::kNotFound);
  ::setenv(kSecretFileEnv, path("c").c_str(), 1);
  EXPECT_TRUE(*load_secret("") == c);
  ::setenv(kSecretEnv, b.to_hex().c_str(), 1);
  EXPECT_TRUE(*load_secret("") == b);
  EXPECT_TRUE(*load_secret(path("a")) == a);
  ::setenv(kSecretEnv, "short", 1);
  auto bad = load_secret("");
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find(kSecretEnv), std::string::npos);
}

}  // namespace
}  // namespace lattice::crypto
