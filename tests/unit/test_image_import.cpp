// Image import (runtime/image/image_import.cpp) and OCI layout resolution (oci_image.cpp) on small
// archives built in the test (test_util.hpp's TarBuilder): hostile member names, a symlink a later
// member would write through, layers with whiteouts, and digests that do not match.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/sha256.hpp"
#include "runtime/image/image_import.hpp"
#include "runtime/image/oci_image.hpp"
#include "tests/unit/test_util.hpp"

using namespace sbx;
using sbx::test::TarBuilder;
using sbx::test::TempDir;
using nlohmann::json;

namespace {

const ImportProgress kQuiet = [](const char*, std::int64_t, std::int64_t) {};

bool exists(const std::string& p) {
  struct stat st;
  return ::lstat(p.c_str(), &st) == 0;
}

std::string digest_of(const std::string& data) { return "sha256:" + sha256_hex(data); }

// Writes `data` as a blob of the layout in `dir`; returns its descriptor.
json put_blob(const TempDir& dir, const std::string& media_type, const std::string& data) {
  std::ofstream(dir / ("blobs/sha256/" + sha256_hex(data)), std::ios::binary) << data;
  return {{"mediaType", media_type}, {"digest", digest_of(data)}, {"size", data.size()}};
}

// An OCI layout of one linux/amd64 image with one layer; returns the manifest's text.
std::string make_layout(const TempDir& dir, const std::string& layer) {
  REQUIRE(::mkdir((dir / "blobs").c_str(), 0755) == 0);
  REQUIRE(::mkdir((dir / "blobs/sha256").c_str(), 0755) == 0);
  std::ofstream(dir / "oci-layout") << R"({"imageLayoutVersion":"1.0.0"})";
  json config = {{"architecture", "amd64"}, {"os", "linux"},
                 {"config", {{"Env", {"PATH=/bin"}}, {"Cmd", {"/bin/sh"}}}},
                 {"rootfs", {{"type", "layers"}, {"diff_ids", {digest_of(layer)}}}}};
  json manifest = {{"schemaVersion", 2},
                   {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
                   {"config", put_blob(dir, "application/vnd.oci.image.config.v1+json", config.dump())},
                   {"layers", {put_blob(dir, "application/vnd.oci.image.layer.v1.tar", layer)}}};
  std::string text = manifest.dump();
  json desc = put_blob(dir, "application/vnd.oci.image.manifest.v1+json", text);
  desc["platform"] = {{"os", "linux"}, {"architecture", "amd64"}};
  std::ofstream(dir / "index.json") << json{{"schemaVersion", 2}, {"manifests", {desc}}}.dump();
  return text;
}

}  // namespace

TEST_CASE("image import: a '..' member is refused and nothing lands outside the staging tree") {
  TempDir t;
  std::string tar = t / "evil.tar", staging = t / "staging";
  REQUIRE(::mkdir(staging.c_str(), 0700) == 0);
  TarBuilder().file("ok", "fine").file("../escaped", "evil").write_to(tar);
  auto r = populate_from_tar(tar, staging, kQuiet);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().stage == Stage("image"));
  CHECK(r.error().message.find("has a '..' component in its name") != std::string::npos);
  CHECK_FALSE(exists(t / "escaped"));
}

TEST_CASE("image import: a member is never written through a symlink an earlier member made") {
  TempDir t;
  std::string tar = t / "link.tar", staging = t / "staging", outside = t / "outside";
  REQUIRE(::mkdir(staging.c_str(), 0700) == 0);
  REQUIRE(::mkdir(outside.c_str(), 0700) == 0);
  TarBuilder().symlink("sub", outside).file("sub/planted", "evil").write_to(tar);
  auto r = populate_from_tar(tar, staging, kQuiet);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("'sub' is not a directory (a symlink or a file) where the archive puts entries under it") !=
        std::string::npos);
  CHECK_FALSE(exists(outside + "/planted"));
}

TEST_CASE("image import: modes are normalised, special files dropped and listed") {
  TempDir t;
  std::string tar = t / "modes.tar", staging = t / "staging";
  REQUIRE(::mkdir(staging.c_str(), 0700) == 0);
  TarBuilder().dir("bin", 0777).file("bin/tool", "#!/bin/sh\n", 04777).fifo("bin/pipe").write_to(tar);
  auto r = populate_from_tar(tar, staging, kQuiet);
  REQUIRE(r.ok());
  CHECK(r->entries == 2);
  CHECK(r->special_bits_cleared == 1);
  REQUIRE(r->dropped.size() == 1);
  CHECK(r->dropped[0].path == "bin/pipe");
  struct stat st;
  REQUIRE(::lstat((staging + "/bin/tool").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == normalise_mode(false, 04777));
  CHECK((st.st_mode & (S_ISUID | S_IWGRP | S_IWOTH)) == 0);
  CHECK_FALSE(exists(staging + "/bin/pipe"));
}

TEST_CASE("image import: owners carried as root where asked, ids past the mapped range left and counted") {
  TempDir t;
  std::string tar = t / "owners.tar";
  TarBuilder()
      .owner(1000, 1000)
      .dir("home", 0700)
      .file("home/notes", "mine", 0600)
      .symlink("home/link", "notes")
      .owner(0, 42)
      .file("shadow", "x", 0640)
      .owner(70000, 70000)
      .file("far", "y")
      .write_to(tar);
  auto owner_of = [](const std::string& p) {
    struct stat st;
    REQUIRE(::lstat(p.c_str(), &st) == 0);
    return std::to_string(st.st_uid) + ":" + std::to_string(st.st_gid);
  };
  const std::string me = std::to_string(::geteuid()) + ":" + std::to_string(::getegid());
  SUBCASE("not asked (rootless, or a container's root): everything is the importer's") {
    std::string staging = t / "plain";
    REQUIRE(::mkdir(staging.c_str(), 0700) == 0);
    auto r = populate_from_tar(tar, staging, kQuiet);
    REQUIRE(r.ok());
    CHECK_FALSE(r->owners_carried);
    CHECK(owner_of(staging + "/home/notes") == me);
  }
  SUBCASE("asked, as root") {
    if (::geteuid() != 0) {
      MESSAGE("skipped: only root may give a file to another user");
      return;
    }
    std::string staging = t / "carried";
    REQUIRE(::mkdir(staging.c_str(), 0700) == 0);
    ImportLimits limits;
    limits.carry_owners = true;
    auto r = populate_from_tar(tar, staging, kQuiet, limits);
    REQUIRE(r.ok());
    CHECK(r->owners_carried);
    // Stored from kOwnerIdBase on: never the host's own user 1000.
    const auto at = [](unsigned id) { return std::to_string(kOwnerIdBase + id); };
    CHECK(owner_of(staging + "/home") == at(1000) + ":" + at(1000));
    CHECK(owner_of(staging + "/home/notes") == at(1000) + ":" + at(1000));
    CHECK(owner_of(staging + "/home/link") == at(1000) + ":" + at(1000));  // the link itself, never its target
    CHECK(owner_of(staging + "/shadow") == at(0) + ":" + at(42));
    CHECK(owner_of(staging + "/far") == me);
    CHECK(r->owners_outside_range == 1);
  }
}

TEST_CASE("image layers: a whiteout deletes a lower layer's entry, an opaque directory empties it") {
  TempDir t;
  std::string l1 = TarBuilder().dir("a").file("a/x", "1").file("a/y", "2").dir("o").file("o/old", "3").str();
  std::string l2 = TarBuilder().file("a/.wh.x", "").file("o/.wh..wh..opq", "").file("o/new", "4").str();
  std::ofstream(t / "l1.tar", std::ios::binary) << l1;
  std::ofstream(t / "l2.tar", std::ios::binary) << l2;
  std::string staging = t / "staging";
  REQUIRE(::mkdir(staging.c_str(), 0700) == 0);
  auto r = apply_layers({t / "l1.tar", t / "l2.tar"}, {digest_of(l1), digest_of(l2)}, staging, kQuiet);
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
  CHECK(r->whiteouts == 2);
  CHECK_FALSE(exists(staging + "/a/x"));
  CHECK(exists(staging + "/a/y"));
  CHECK_FALSE(exists(staging + "/a/.wh.x"));
  CHECK_FALSE(exists(staging + "/o/old"));
  CHECK(exists(staging + "/o/new"));
}

TEST_CASE("image layers: a layer whose bytes do not match its digest is refused") {
  TempDir t;
  std::string l1 = TarBuilder().file("f", "data").str();
  std::ofstream(t / "l1.tar", std::ios::binary) << l1;
  std::string staging = t / "staging";
  REQUIRE(::mkdir(staging.c_str(), 0700) == 0);
  std::string wrong = digest_of("something else");
  auto r = apply_layers({t / "l1.tar"}, {wrong}, staging, kQuiet);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("does not match its digest " + wrong) != std::string::npos);
  CHECK(r.error().message.find("(its content is " + digest_of(l1) + ")") != std::string::npos);
}

TEST_CASE("oci layout: resolved for its platform; a tampered manifest blob is refused by its digest") {
  TempDir t;
  std::string layer = TarBuilder().file("hello", "world").str();
  std::string manifest = make_layout(t, layer);
  SUBCASE("intact") {
    CHECK(container_format(t.path) == "oci-layout");
    auto img = resolve_container_image(t.path, "linux/amd64");
    REQUIRE_MESSAGE(img.ok(), (img.ok() ? "" : img.error().message));
    CHECK(img->manifest_digest == digest_of(manifest));
    CHECK(img->platform == "linux/amd64");
    REQUIRE(img->layer_digests.size() == 1);
    CHECK(img->layer_digests[0] == digest_of(layer));
    CHECK(img->run_defaults["Cmd"] == json{"/bin/sh"});
    auto other = resolve_container_image(t.path, "linux/arm64");
    REQUIRE_FALSE(other.ok());
    CHECK(other.error().message.find("no image for linux/arm64") != std::string::npos);
  }
  SUBCASE("the manifest's bytes changed, its size kept") {
    std::string tampered = manifest;
    tampered[0] = ' ';  // "{" -> " {": the same size, another digest
    std::ofstream(t / ("blobs/sha256/" + sha256_hex(manifest)), std::ios::binary | std::ios::trunc) << tampered;
    auto img = resolve_container_image(t.path, "linux/amd64");
    REQUIRE_FALSE(img.ok());
    CHECK(img.error().stage == Stage("image"));
    CHECK(img.error().message.find("manifest " + digest_of(manifest) + " in " + t.path + " does not match its digest") !=
          std::string::npos);
  }
}
