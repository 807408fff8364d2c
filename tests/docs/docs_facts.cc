// det_docs_facts: the facts the docs checker (tests/docs/docs_check.py) needs
// that live only in C++, printed as one JSON object on stdout.
//
//   det_docs_facts --descriptor-set FILE
//
// FILE is a FileDescriptorSet written by `protoc --include_source_info
// --descriptor_set_out=FILE` over proto/det/api/v1/*.proto (the build makes
// it: tests/docs/CMakeLists.txt). The object holds:
//   config_fields  every row of det::ExperimentConfigFields(): path, subtree,
//                  unused_reason ("" for a field det-cpp reads).
//   routes         every REST route the master serves, as GET /api/v1/routes
//                  lists them (RestDispatcher::routes()): method, path, rpc,
//                  authenticated, generic, streaming.
//   declared       the declared route table (AllRestRoutes()): method, path,
//                  rpc, json_body, fixed, caps, ndjson, own_format.
//   files          per .proto file under det/api/v1/: name, comment (the
//                  comment block above `syntax`), services: name, full_name,
//                  comment, trailing_comment (after its opening brace),
//                  methods: name, input, output, client_streaming,
//                  server_streaming, comment (leading), group (the last
//                  detached comment above it, e.g. "---- master").
// Exit status 2 with a message on stderr for bad arguments or an unreadable
// descriptor set.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <google/protobuf/descriptor.pb.h>
#include <nlohmann/json.hpp>

#include "common/config_fields.h"
#include "master/http/rest_dispatch.h"
#include "master/http/rest_routes.h"

namespace {

namespace pb = google::protobuf;
using nlohmann::json;

// Field numbers of descriptor.proto used in SourceCodeInfo paths.
constexpr int kFileSyntax = 12;
constexpr int kFileService = 6;
constexpr int kServiceMethod = 2;

// The location of `path` in `file`, or nullptr.
const pb::SourceCodeInfo::Location* FindLocation(const pb::FileDescriptorProto& file, const std::vector<int>& path) {
  for (const auto& loc : file.source_code_info().location()) {
    if (std::vector<int>(loc.path().begin(), loc.path().end()) == path) return &loc;
  }
  return nullptr;
}

std::string Leading(const pb::FileDescriptorProto& file, const std::vector<int>& path) {
  const auto* loc = FindLocation(file, path);
  return loc == nullptr ? "" : loc->leading_comments();
}

std::string Trailing(const pb::FileDescriptorProto& file, const std::vector<int>& path) {
  const auto* loc = FindLocation(file, path);
  return loc == nullptr ? "" : loc->trailing_comments();
}

std::string LastDetached(const pb::FileDescriptorProto& file, const std::vector<int>& path) {
  const auto* loc = FindLocation(file, path);
  if (loc == nullptr || loc->leading_detached_comments_size() == 0) return "";
  return loc->leading_detached_comments(loc->leading_detached_comments_size() - 1);
}

std::string FileComment(const pb::FileDescriptorProto& file) {
  const auto* loc = FindLocation(file, {kFileSyntax});
  if (loc == nullptr) return "";
  std::string out;
  for (const std::string& c : loc->leading_detached_comments()) out += c;
  return out + loc->leading_comments();
}

json ServiceJson(const pb::FileDescriptorProto& file, int s) {
  const pb::ServiceDescriptorProto& service = file.service(s);
  json methods = json::array();
  for (int m = 0; m < service.method_size(); ++m) {
    const pb::MethodDescriptorProto& method = service.method(m);
    const std::vector<int> path = {kFileService, s, kServiceMethod, m};
    methods.push_back({{"name", method.name()},
                       {"input", method.input_type()},
                       {"output", method.output_type()},
                       {"client_streaming", method.client_streaming()},
                       {"server_streaming", method.server_streaming()},
                       {"comment", Leading(file, path)},
                       {"group", LastDetached(file, path)}});
  }
  return {{"name", service.name()},
          {"full_name", file.package() + "." + service.name()},
          {"comment", Leading(file, {kFileService, s})},
          {"trailing_comment", Trailing(file, {kFileService, s})},
          {"methods", methods}};
}

json ProtoFiles(const pb::FileDescriptorSet& set) {
  json files = json::array();
  for (const pb::FileDescriptorProto& file : set.file()) {
    if (file.name().rfind("det/api/v1/", 0) != 0) continue;
    json services = json::array();
    for (int s = 0; s < file.service_size(); ++s) services.push_back(ServiceJson(file, s));
    files.push_back({{"name", file.name()}, {"comment", FileComment(file)}, {"services", services}});
  }
  return files;
}

json ConfigFields() {
  json out = json::array();
  for (const det::ConfigField& f : det::ExperimentConfigFields()) {
    out.push_back({{"path", std::string(f.path)},
                   {"subtree", f.subtree},
                   {"unused_reason", std::string(f.unused_reason)}});
  }
  return out;
}

json Routes() {
  const det::master::RestDispatcher dispatcher(nullptr, det::master::AllRestRoutes());
  json out = json::array();
  for (const det::master::RestRouteInfo& r : dispatcher.routes()) {
    out.push_back({{"method", r.method},
                   {"path", r.pattern},
                   {"rpc", r.rpc},
                   {"authenticated", r.authenticated},
                   {"generic", r.generic},
                   {"streaming", r.streaming}});
  }
  return out;
}

json Declared() {
  json out = json::array();
  for (const det::master::RestRoute& r : det::master::AllRestRoutes()) {
    out.push_back({{"method", r.method},
                   {"path", r.path},
                   {"rpc", r.rpc},
                   {"json_body", r.body == det::master::RestBody::kJson},
                   {"fixed", r.fixed},
                   {"caps", r.caps},
                   {"ndjson", r.ndjson},
                   {"own_format", r.streamer != nullptr}});
  }
  return out;
}

int Usage(const char* problem) {
  std::fprintf(stderr, "det_docs_facts: error: %s\nusage: det_docs_facts --descriptor-set FILE\n", problem);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || std::string(argv[1]) != "--descriptor-set") return Usage("expected --descriptor-set FILE");
  std::ifstream in(argv[2], std::ios::binary);
  pb::FileDescriptorSet set;
  if (!in || !set.ParseFromIstream(&in)) {
    std::fprintf(stderr, "det_docs_facts: error: --descriptor-set %s: unreadable or not a FileDescriptorSet\n",
                 argv[2]);
    return 2;
  }
  json facts = {{"config_fields", ConfigFields()},
                {"routes", Routes()},
                {"declared", Declared()},
                {"files", ProtoFiles(set)}};
  std::cout << facts.dump(1) << "\n";
  return 0;
}
