"""Test machinery: the lifecycle simulator, its runner, fakes, stubs and fixture helpers."""
