# plot.gp - time against tokens, one line per backend and baseline (log-log), for plot.sh.
# Variables (gnuplot -e): out (PNG path), ttl (title), files (dat paths), labels (one word per
# file), floor (dat path of the floor, or "-"). A dat file holds "T ms_median ms_p20 ms_p80".
set terminal pngcairo size 1000,640 enhanced font "DejaVu Sans,11"
set output out
set title ttl noenhanced
set xlabel "tokens T"
set ylabel "time per call, ms (median; bars p20..p80)"
set logscale x 2
set logscale y 10
set format y "%g"
set format x "%g"
set grid xtics ytics mytics
set key top left box opaque noenhanced
set pointsize 1.2
n = words(files)
if (floor ne "-") {
    plot for [i=1:n] word(files, i) using 1:2:3:4 with yerrorlines lw 2 title word(labels, i), \
         floor using 1:2 with lines dt 2 lw 2 lc rgb "black" title "floor (bytes / bandwidth, flops / GEMM rate)"
} else {
    plot for [i=1:n] word(files, i) using 1:2:3:4 with yerrorlines lw 2 title word(labels, i)
}
