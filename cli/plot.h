/* cli/plot.h: `tfg plot` (cli/plot.c). */
#ifndef TFG_CLI_PLOT_H
#define TFG_CLI_PLOT_H

/* Draws the train log csv as an SVG picture into out: 0, or the exit
 * code after a message on stderr (1: a file that is not a train log, or
 * unreadable; 3: out cannot be written). */
int cli_plot(const char *csv, const char *out);

#endif
