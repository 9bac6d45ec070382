# Conan's test of the strata package: a consumer project that finds it through
# CMakeDeps/CMakeToolchain, built and run on 2 processes (with mpi=True).
import os

from conan import ConanFile
from conan.tools.build import can_run
from conan.tools.cmake import CMake, cmake_layout


class StrataTestConan(ConanFile):
    settings = "os", "arch", "compiler", "build_type"
    generators = "CMakeDeps", "CMakeToolchain"

    def requirements(self):
        self.requires(self.tested_reference_str)

    def layout(self):
        cmake_layout(self)

    def build(self):
        cmake = CMake(self)
        cmake.configure()
        cmake.build()

    def test(self):
        if not can_run(self):
            return
        exe = os.path.join(self.cpp.build.bindir, "test_package")
        mpi = self.dependencies[self.tested_reference_str].options.mpi
        launcher = os.environ.get("STRATA_MPIEXEC", "mpiexec")
        self.run(f"{launcher} -n 2 {exe}" if mpi else exe, env="conanrun")
