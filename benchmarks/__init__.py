"""Speed and memory benchmarks of hbvm (issue 4); numbers and the commands that produced them: README.md."""
