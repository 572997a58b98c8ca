// Package traj evaluates camera trajectories: it reads TUM-format files,
// associates two trajectories by timestamp, aligns them with Umeyama's closed
// form (SE(3) or Sim(3)) and computes the absolute trajectory error (ATE) and
// the relative pose error (RPE).
//
// Definitions (as in the TUM RGB-D benchmark and evo):
//
//   - File format: one pose per line, "timestamp tx ty tz qx qy qz qw", the
//     camera→world pose (position of the camera in the world, Hamilton unit
//     quaternion of its orientation). Fields may be separated by spaces, tabs or
//     commas; lines starting with '#' and blank lines are ignored. Quaternions
//     are normalised on reading.
//   - Association: as TUM's associate.py. Every pair (e, r) of an estimated and
//     a reference stamp with |(t_e + offset) − t_r| < max_diff is a candidate;
//     candidates are taken greedily in order of increasing time difference, each
//     pose used at most once (one-to-one). Pairs are then ordered by time.
//     Stamps equal within their float64 resolution (a few units in the last
//     place) are candidates whatever max_diff is, so exact matches are never
//     lost to rounding.
//   - Alignment: Umeyama (1991) least squares on the associated positions,
//     minimising Σ‖p_ref − (s·R·p_est + t)‖². "sim3" estimates s, R, t (the
//     right choice for monocular estimates, whose scale is arbitrary); "se3"
//     fixes s = 1; "none" uses the estimate as it is. The whole estimated pose is
//     transformed: position s·R·p + t, orientation R·R_est. As in evo, "sim3"
//     and "se3" need the positions' cross-covariance to have rank ≥ 2: fewer
//     than 3 pairs, or positions on one line, are refused (ErrDegenerate).
//   - ATE: for each associated pair i, e_i = ‖p_ref,i − p_aligned,i‖ (metres of
//     the reference). Reported: RMSE = sqrt(mean e²), mean, median, standard
//     deviation (population, as numpy.std), min, max.
//   - RPE at frame delta Δ (counted in associated pairs): with Q the reference
//     and P the aligned estimate as 4×4 poses, E_i = (Q_i⁻¹·Q_{i+Δ})⁻¹ ·
//     (P_i⁻¹·P_{i+Δ}) for every i; translation error ‖trans(E_i)‖, rotation
//     error angle(E_i) = arccos((trace(R(E_i)) − 1)/2) in degrees. The same
//     statistics as for the ATE are reported for both. Note that RPE is
//     invariant to the rigid part of the alignment but not to its scale, so
//     with "sim3" the estimate is compared at the reference's scale.
package traj
