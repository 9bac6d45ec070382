# Conan 2 recipe for strata, a header-only library. The package is the headers and one
# CMake module; the options change only what a consumer links (requirements, defines,
# the strata::cuda target), never the package's files, so every configuration shares
# one package (empty package_id).
#
#   conan create packaging/conan -pr:a packaging/conan/profiles/system   (system libraries)
#   conan create packaging/conan                                          (Conan Center's)
#
# System requirements in every configuration: an OpenMP compiler and OpenBLAS (its
# OpenMP build preferred, Debian's libopenblas-openmp-dev), and on x86-64 SLEEF
# (libsleef-dev); with cuda=True, the CUDA
# toolkit (12.3 or later: cudart, cuBLAS, CCCL) and NCCL 2.18 or later. With mlflow=True
# the package has a strata::mlflow target (observe/mlflow.hpp, MLflow tracking) over
# libcurl.
import os
import re

from conan import ConanFile
from conan.tools.build import check_min_cppstd
from conan.tools.files import copy, load

required_conan_version = ">=2.0"


class StrataConan(ConanFile):
    name = "strata"
    description = "Header-only C++20 distributed training: data, ZeRO 1-3, tensor and pipeline parallel"
    license = "MIT"
    url = "https://github.com/strata-train/strata"
    homepage = "https://github.com/strata-train/strata"
    topics = ("deep-learning", "distributed-training", "mpi", "nccl", "cuda", "header-only")
    package_type = "header-library"
    settings = "os", "arch", "compiler", "build_type"
    options = {"mpi": [True, False], "cuda": [True, False], "mlflow": [True, False]}
    default_options = {"mpi": True, "cuda": False, "mlflow": False}
    no_copy_source = True

    # The recipe lives in packaging/conan; the sources are the repository's.
    def _root(self):
        return os.path.join(self.recipe_folder, "..", "..")

    def set_version(self):
        text = load(self, os.path.join(self._root(), "include", "strata", "core", "version.hpp"))
        self.version = re.search(r'#define STRATA_VERSION_STRING "([^"]+)"', text).group(1)

    def export_sources(self):
        root = self._root()
        copy(self, "*", os.path.join(root, "include"), os.path.join(self.export_sources_folder, "include"))
        copy(self, "LICENSE", root, self.export_sources_folder)
        for module in ("strataBlas.cmake", "strataSleef.cmake", "strataCudaUsage.cmake", "FindNCCL.cmake"):
            copy(self, module, os.path.join(root, "cmake"), os.path.join(self.export_sources_folder, "cmake"))
        copy(self, "strata-conan.cmake", self.recipe_folder, os.path.join(self.export_sources_folder, "cmake"))

    def requirements(self):
        # Boost for Boost.PFR (headers only); the ranges are what CMakeLists.txt accepts.
        self.requires("boost/[>=1.81 <2]")
        self.requires("nlohmann_json/[>=3.10 <4]")
        if self.options.mpi:
            self.requires("openmpi/[>=4.1 <6]")
        if self.options.mlflow:
            self.requires("libcurl/[>=7.78 <9]")

    def package_id(self):
        self.info.clear()

    def validate(self):
        check_min_cppstd(self, 20)

    def package(self):
        copy(self, "LICENSE", self.source_folder, os.path.join(self.package_folder, "licenses"))
        copy(self, "*", os.path.join(self.source_folder, "include"), os.path.join(self.package_folder, "include"))
        copy(self, "*.cmake", os.path.join(self.source_folder, "cmake"),
             os.path.join(self.package_folder, "lib", "cmake", "strata"))

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "strata")
        module = os.path.join("lib", "cmake", "strata", "strata-conan.cmake")
        core = self.cpp_info.components["core"]
        core.set_property("cmake_target_name", "strata::strata")
        core.bindirs = []
        core.libdirs = []
        core.defines = ["STRATA_HAS_MPI=%d" % (1 if self.options.mpi else 0)]
        # A requirement that the profile's [platform_requires] leaves to the system is not
        # among the dependencies (nor may a component name it): strata-conan.cmake finds it.
        targets = {"boost": "boost::headers", "nlohmann_json": "nlohmann_json::nlohmann_json",
                   "openmpi": "openmpi::openmpi"}
        direct = [d.ref.name for d in self.dependencies.direct_host.values()]
        core.requires = [targets[name] for name in direct if name in targets]
        if self.options.mlflow:
            mlflow = self.cpp_info.components["mlflow"]
            mlflow.set_property("cmake_target_name", "strata::mlflow")
            mlflow.bindirs = []
            mlflow.libdirs = []
            mlflow.includedirs = []
            mlflow.defines = ["STRATA_HAS_MLFLOW=1"]
            mlflow.requires = ["core"] + (["libcurl::libcurl"] if "libcurl" in direct else [])
        if self.options.cuda:
            cuda = self.cpp_info.components["cuda"]
            cuda.set_property("cmake_target_name", "strata::cuda")
            cuda.bindirs = []
            cuda.libdirs = []
            cuda.includedirs = []
            cuda.requires = ["core"]  # strata-conan.cmake adds the rest, as strataCuda.cmake does
        # Threads, OpenMP, OpenBLAS, SLEEF and (cuda=True) CUDA and NCCL come from the system:
        # the module finds them and links them into the targets above, and also finds
        # the Conan requirements that a [platform_requires] profile left to the system.
        self.cpp_info.set_property("cmake_build_modules", [module])
        self.cpp_info.builddirs = [os.path.join("lib", "cmake", "strata")]
