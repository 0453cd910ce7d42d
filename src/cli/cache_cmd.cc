namespace kvstash::cli { int cache_main(int, char**) { return 0; } }
