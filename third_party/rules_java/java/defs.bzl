"""The native Java rules under the names rules_java exports; what @bazel_tools loads from @rules_java."""

# rules_java 4.0 only wraps these same native rules (adding a migration tag), so re-exporting them keeps
# Bazel's behaviour while needing no download.
java_binary = native.java_binary
java_import = native.java_import
java_library = native.java_library
java_lite_proto_library = native.java_lite_proto_library
java_package_configuration = native.java_package_configuration
java_plugin = native.java_plugin
java_proto_library = native.java_proto_library
java_runtime = native.java_runtime
java_test = native.java_test
java_toolchain = native.java_toolchain
