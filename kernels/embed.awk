# kernels/embed.awk: a text file as a C string constant (the headers NVRTC compiles fused kernels with).
#   awk -v name=NAME -f kernels/embed.awk FILE  ->  extern const char NAME[]; const char NAME[] = "...";
BEGIN { printf "extern const char %s[];\nconst char %s[] =\n", name, name }
{
  gsub(/\\/, "\\\\\\\\")
  gsub(/"/, "\\\"")
  printf "  \"%s\\n\"\n", $0
}
END { print ";" }
