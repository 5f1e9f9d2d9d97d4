"""Speed and memory benchmarks of hbvm; numbers and the commands that produced them: README.md."""
