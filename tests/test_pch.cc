// The translation unit that owns the tests' precompiled header (tests/CMakeLists.txt):
// CMake builds the header with this target's flags and every test reuses it. It defines
// nothing of its own.
