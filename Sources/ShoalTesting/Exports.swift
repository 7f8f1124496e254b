// SeededRandom moved to ShoalCore (the mesh manager draws its jitter from it); tests that import
// only ShoalTesting keep finding it here.
@_exported import struct ShoalCore.SeededRandom
