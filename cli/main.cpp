// main.cpp: the troupe command line (placeholder until the commands land).
#include <cstdio>
int main() {
  std::puts("troupe: not built yet");
  return 1;
}
