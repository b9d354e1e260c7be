#!/usr/bin/env python3
"""Tests of cmake/groups.cmake and cmake/include_roots.cmake: a configure fails on a link the
groups' rules do not allow, and a group's root library does not show its sub-libraries' headers.

Each case configures a small project of its own that uses the project's CMake modules, with
folders named as the project's groups are."""
import os
import shutil
import subprocess
import tempfile
import unittest

SOURCE_DIR = os.path.abspath(os.environ.get(
    "IPUPOD_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", "..")))

TOP = """cmake_minimum_required(VERSION 3.25)
project(groups_case CXX)
include({src}/cmake/include_roots.cmake)
include({src}/cmake/link_closure.cmake)
include({src}/cmake/groups.cmake)
function(lib name)
  add_library(${{name}} STATIC ${{ARGN}})
  ipupod_export_include_root(${{name}})
endfunction()
add_subdirectory(common)
add_subdirectory(device)
add_subdirectory(scheduler)
add_subdirectory(client)
{extra}
ipupod_check_group_rules(common device scheduler client)
"""


class GroupRulesTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="ipupod-groups-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def write(self, path, text):
        full = os.path.join(self.dir, "src", path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as f:
            f.write(text)

    def project(self, device_links="ipupod_common", client_links="ipupod_common", extra=""):
        self.write("CMakeLists.txt", TOP.format(src=SOURCE_DIR, extra=extra))
        self.write("common/CMakeLists.txt", "lib(ipupod_common c.cc)\n")
        self.write("common/c.cc", "int c() { return 1; }\n")
        self.write("device/CMakeLists.txt",
                   f"lib(ipupod_device d.cc)\ntarget_link_libraries(ipupod_device PUBLIC "
                   f"{device_links})\nadd_subdirectory(kernels)\n")
        self.write("device/d.cc", "int d() { return 1; }\n")
        self.write("device/d.h", "int d();\n")
        self.write("device/kernels/CMakeLists.txt", "lib(ipupod_kernels k.cc)\n")
        self.write("device/kernels/k.cc", "int k() { return 1; }\n")
        self.write("device/kernels/k.h", "int k();\n")
        self.write("scheduler/CMakeLists.txt",
                   "lib(ipupod_scheduler s.cc)\ntarget_link_libraries(ipupod_scheduler PUBLIC "
                   "ipupod_device)\n")
        self.write("scheduler/s.cc", "int s() { return 1; }\n")
        self.write("client/CMakeLists.txt",
                   f"lib(ipupod_client cl.cc)\ntarget_link_libraries(ipupod_client PUBLIC "
                   f"{client_links})\n")
        self.write("client/cl.cc", "int cl() { return 1; }\n")

    def configure(self):
        return subprocess.run(
            ["cmake", "-S", os.path.join(self.dir, "src"), "-B", os.path.join(self.dir, "b")],
            capture_output=True, text=True, timeout=120)

    def build(self):
        return subprocess.run(["cmake", "--build", os.path.join(self.dir, "b")],
                              capture_output=True, text=True, timeout=300)

    def test_allowed_links_configure(self):
        self.project()
        done = self.configure()
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)

    def test_device_linking_the_scheduler_fails_naming_both(self):
        self.project(device_links="ipupod_common ipupod_scheduler")
        done = self.configure()
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("ipupod_device (device/) links ipupod_scheduler (scheduler/)", done.stderr)

    def test_a_link_through_an_allowed_library_is_found(self):
        # client -> device is not allowed, also when it comes through the scheduler's library
        # (which client may not link either: the first forbidden link of the closure is named).
        self.project(client_links="ipupod_common ipupod_scheduler")
        done = self.configure()
        self.assertNotEqual(done.returncode, 0)
        self.assertRegex(done.stderr, r"ipupod_client \(client/\) links ipupod_(scheduler|device)")
        self.assertIn("groups' rules do not allow", done.stderr)

    def test_an_exception_names_one_target(self):
        self.project(client_links="ipupod_common ipupod_kernels",
                     extra='ipupod_group_exception(ipupod_client ipupod_kernels "a reason")')
        done = self.configure()
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)

    def test_a_group_root_does_not_show_its_sub_libraries_headers(self):
        self.project()
        # ipupod_device's own header is visible to what links it; its sub-library's is not.
        self.write("scheduler/s.cc", '#include "device/d.h"\nint s() { return d(); }\n')
        self.write("common/c.cc", "int c() { return 1; }\n")
        self.write("client/cl.cc", "int cl() { return 1; }\n")
        self.assertEqual(self.configure().returncode, 0)
        done = self.build()
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.write("scheduler/s.cc", '#include "device/kernels/k.h"\nint s() { return k(); }\n')
        done = self.build()
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("device/kernels/k.h", done.stdout + done.stderr)


if __name__ == "__main__":
    unittest.main()
